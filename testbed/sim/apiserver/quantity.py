"""Resource quantities as kube-apiserver stores them: parsed as k8s.io/apimachinery's
resource.Quantity parses them and written back in its canonical form.

The rules (apimachinery `resource.Quantity`, "re-emitted in their canonical form"):
- a quantity is `<sign?><digits>[.<digits>]<suffix>`; the suffix is a binary SI one (Ki Mi Gi Ti
  Pi Ei), a decimal SI one (n u m "" k M G T P E) or a decimal exponent (e3, E-6); anything else
  is refused with apimachinery's message;
- values are rounded up (away from zero) to a nano;
- the output keeps the input's family: decimal SI prints the integer mantissa with the largest
  exponent that is a multiple of 3 (8000 -> 8k, 1500 -> 1500, 0.5 -> 500m, 1000m -> 1); a decimal
  exponent prints e<3n> the same way (1e3 stays 1e3, 1200e0 -> 1200); binary SI prints the
  largest power of 1024 that divides the value (1024Mi -> 1Gi, 1536Mi stays 1536Mi), but values
  under 1024 in magnitude or not whole are printed as decimal SI (0.5Ki -> 512);
- 0 is "0".

This is the simulation's own reading of the documented rules; it shares nothing with the product's
parser (which it exists to test).
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction
from typing import Any

PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERROR = f"quantities must match the regular expression '{PATTERN}'"
_NUMBER = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)$", re.DOTALL)
_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)")
BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {v: k for k, v in DECIMAL.items()}
_BINARY_SUFFIX = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
MAX_DIGITS = 64  # longer numbers than any resource needs are refused, not computed
MAX_EXPONENT = 64


class QuantityError(ValueError):
    pass


def parse(text: Any) -> tuple[Fraction, str]:
    """(exact value, format) with format "BinarySI", "DecimalSI" or "DecimalExponent"."""
    if type(text) in (str, int, float):
        return _parse_cached(text)
    return _parse(text)


@functools.lru_cache(maxsize=4096, typed=True)
def _parse_cached(text: str | int | float) -> tuple[Fraction, str]:
    return _parse(text)  # a Fraction is immutable: callers may share it


def _parse(text: Any) -> tuple[Fraction, str]:
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise QuantityError(ERROR)
    if isinstance(text, (int, float)):
        text = repr(text) if isinstance(text, float) else str(text)
    m = _NUMBER.match(text)
    if not m:
        raise QuantityError(ERROR)
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3) or "", m.group(4)
    if not whole and not frac:
        raise QuantityError(ERROR)
    if len(whole) + len(frac) > MAX_DIGITS:
        raise QuantityError(f"{ERROR} (and have at most {MAX_DIGITS} digits)")
    value = Fraction(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))
    if suffix in BINARY:
        value, fmt = value * 2 ** BINARY[suffix], "BinarySI"
    elif suffix in DECIMAL:
        value, fmt = value * Fraction(10) ** DECIMAL[suffix], "DecimalSI"
    elif e := _EXPONENT.fullmatch(suffix):
        exponent = int(e.group(1))
        if abs(exponent) > MAX_EXPONENT:
            raise QuantityError(f"{ERROR} (with an exponent of at most {MAX_EXPONENT})")
        value, fmt = value * Fraction(10) ** exponent, "DecimalExponent"
    else:
        raise QuantityError(ERROR)
    return (-value if sign == "-" else value), fmt


def _round_up_to_nano(value: Fraction) -> Fraction:
    """Round away from zero to a whole number of nanos, as Quantity does."""
    nanos = math.ceil(abs(value) * 10**9)
    return Fraction(nanos if value >= 0 else -nanos, 10**9)


def _decimal(value: Fraction, fmt: str) -> str:
    # value is a whole number of nanos: mantissa * 10^exponent with the largest exponent (a
    # multiple of 3) that keeps the mantissa whole.
    mantissa, exponent = int(value * 10**9), -9
    while mantissa and mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3
    mantissa, exponent = mantissa * 10**shift, exponent - shift
    if fmt == "DecimalExponent":
        return f"{mantissa}" + (f"e{exponent}" if exponent else "")
    if exponent > 18:
        mantissa, exponent = mantissa * 10 ** (exponent - 18), 18
    return f"{mantissa}{_DECIMAL_SUFFIX[exponent]}"


def canonical(text: Any) -> str:
    """The canonical string kube-apiserver stores for a quantity; QuantityError if it is not one."""
    if type(text) in (str, int, float):
        return _canonical_cached(text)
    return _canonical(text)


# A fleet writes the same few quantities over and over (every node's capacity, every pod's limits),
# and exact Fraction arithmetic is the dearest part of a write: remember the last few thousand.
@functools.lru_cache(maxsize=4096, typed=True)
def _canonical_cached(text: str | int | float) -> str:
    return _canonical(text)


def _canonical(text: Any) -> str:
    value, fmt = parse(text)
    value = _round_up_to_nano(value)
    if value == 0:
        return "0"
    if fmt == "BinarySI":
        if abs(value) < 1024 or value.denominator != 1:
            return _decimal(value, "DecimalSI")
        number, power = int(value), 0
        while power < 6 and number % 1024 == 0:
            number //= 1024
            power += 1
        return f"{number}{_BINARY_SUFFIX[power]}"
    return _decimal(value, fmt)
