"""Kubernetes resource quantities (`8k`, `8000`, `1e3`, `30Ki`), read the way `resource.Quantity` reads them.

The grammar (k8s.io/apimachinery `resource.Quantity`):

    <quantity>  ::= <sign>? <number> <suffix>
    <number>    ::= <digits> | <digits>. | <digits>.<digits> | .<digits>
    <suffix>    ::= "" | n | u | m | k | M | G | T | P | E          (decimal SI)
                  | Ki | Mi | Gi | Ti | Pi | Ei                      (binary SI)
                  | e<signed int> | E<signed int>                   (decimal exponent, |exp| < 2^31)

Kept exactly: leading zeros and a bare sign or dot are zero (`-`, `.`, `1.` and `1.G` parse); no
whitespace; `K` and `1i` are errors; values round up (away from zero) to the nearest nano; binary
values are capped at 2^63-1. `Value()` is the integer rounded up; `AsInt64()` is the exact integer or
nothing (what HAMi uses for device counts and MiB). A real API server re-emits quantities in
canonical form (`8000` becomes `8k`), so every resource dynmig reads goes through here.

Two bounds of our own, so hostile text costs nothing: the text is at most `MAX_TEXT` characters,
and a magnitude beyond 10^30 is not expanded (it is far past int64; `saturated` is set).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

MAX_TEXT = 256
INT64_MAX = (1 << 63) - 1
_DIGITS = frozenset("0123456789")
_SUFFIX_LETTERS = frozenset("eEinumkKMGTP")
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_NANO = Fraction(1, 10**9)
_HUGE_DIGITS = 30  # beyond 10^30 the value is only "far too large": never expanded

DECIMAL_SI, BINARY_SI, DECIMAL_EXPONENT = "DecimalSI", "BinarySI", "DecimalExponent"


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity; the message says what is wrong."""


@dataclass(frozen=True)
class Quantity:
    """An exact amount (rounded up to a nano, as Kubernetes stores it) and the format its suffix implies."""

    amount: Fraction
    format: str = DECIMAL_SI
    saturated: bool = False  # magnitude beyond 10^30: `amount` is only a stand-in of the right sign

    def as_int64(self) -> int | None:
        """The exact integer if the amount is one within int64, else None (Quantity.AsInt64)."""
        if self.saturated or self.amount.denominator != 1 or abs(self.amount) > INT64_MAX:
            return None
        return int(self.amount)

    def value(self) -> int:
        """The amount rounded up (away from zero) to an integer, saturating at int64 (Quantity.Value)."""
        a = self.amount
        magnitude = -(-abs(a.numerator) // a.denominator)
        whole = magnitude if a >= 0 else -magnitude
        if self.saturated or abs(whole) > INT64_MAX:
            return INT64_MAX if a > 0 else -INT64_MAX - 1
        return whole


def _scan(text: str) -> tuple[bool, str, str, str]:
    """Split into (positive, integer digits, fraction digits, suffix) like Kubernetes' scanner."""
    pos, end, positive = 0, len(text), True
    if text[0] in "+-":
        positive, pos = text[0] == "+", 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos]
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_LETTERS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(
            f"{text!r} is not a quantity: expected a number with an optional suffix "
            "(n u m k M G T P E, Ki Mi Gi Ti Pi Ei, or an exponent such as e3)"
        )
    return positive, num, denom, text[suffix_start:]


def _suffix(text: str, suffix: str) -> tuple[int, int, str]:
    """(base, exponent, format) of a suffix."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], DECIMAL_SI
    if suffix in _BINARY:
        return 2, _BINARY[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        rest = suffix[1:]
        body = rest[1:] if rest[0] in "+-" else rest
        if body and set(body) <= _DIGITS and abs(exponent := int(rest)) <= (1 << 31) - 1:
            return 10, exponent, DECIMAL_EXPONENT
    raise QuantityError(
        f"{text!r} has an unknown suffix {suffix!r}: use n u m k M G T P E, Ki Mi Gi Ti Pi Ei, "
        "or an exponent such as e3"
    )


def parse_quantity(text: str) -> Quantity:
    """Parse a quantity string, accepting and rejecting what Kubernetes' ParseQuantity does."""
    if not isinstance(text, str):
        raise QuantityError(f"a quantity must be a string, not {type(text).__name__}")
    if not text:
        raise QuantityError("an empty string is not a quantity")
    if len(text) > MAX_TEXT:
        raise QuantityError(f"a quantity of {len(text)} characters is longer than {MAX_TEXT}")
    return _parse(text)


@lru_cache(maxsize=1024)  # the same few texts ("1", "8k") on every pod; bounded, so any input is
def _parse(text: str) -> Quantity:  # safe; a Quantity is immutable, so sharing one is too
    positive, num, denom, suffix = _scan(text)
    base, exponent, fmt = _suffix(text, suffix)
    digits = (num + denom).lstrip("0")
    if not digits:
        return Quantity(Fraction(0), fmt)
    sign = 1 if positive else -1
    scale10 = (exponent if base == 10 else 0) - len(denom)
    # Order of magnitude in decimal digits (binary suffixes add at most 19 digits).
    magnitude = len(digits) + scale10 + (exponent * 3 // 10 + 1 if base == 2 else 0)
    if magnitude > _HUGE_DIGITS:
        if fmt == BINARY_SI:
            return Quantity(Fraction(sign * INT64_MAX), fmt)
        return Quantity(Fraction(sign * 10**_HUGE_DIGITS), fmt, saturated=True)
    if magnitude < -12:  # below a nano: rounds up to one nano, as Kubernetes does
        return Quantity(sign * _NANO, DECIMAL_SI if fmt == BINARY_SI else fmt)
    amount = Fraction(int(digits)) * (Fraction(10) ** scale10)
    if base == 2:
        amount *= 1 << exponent
    amount = _round_up_to_nano(amount)
    if fmt == BINARY_SI:
        amount = min(amount, Fraction(INT64_MAX))
        if amount < 1:
            fmt = DECIMAL_SI
    return Quantity(sign * amount, fmt)


def _round_up_to_nano(amount: Fraction) -> Fraction:
    nanos = amount / _NANO
    whole = -(-nanos.numerator // nanos.denominator)
    return whole * _NANO
