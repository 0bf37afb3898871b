"""The quantity parser against Kubernetes' own examples (apimachinery resource/quantity_test.go)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from mig.quantity import BINARY_SI, DECIMAL_EXPONENT, DECIMAL_SI, INT64_MAX, QuantityError, parse_quantity


def dec(mantissa: float, exponent: int) -> Fraction:
    return Fraction(mantissa) * Fraction(10) ** exponent


KIB = 1024

# (text, exact amount after parsing, format) — Kubernetes' TestQuantityParse table.
PARSED = [
    ("0", dec(0, 0), DECIMAL_SI),
    ("0n", dec(0, 0), DECIMAL_SI),
    ("0u", dec(0, 0), DECIMAL_SI),
    ("0m", dec(0, 0), DECIMAL_SI),
    ("0Ki", dec(0, 0), BINARY_SI),
    ("0k", dec(0, 0), DECIMAL_SI),
    ("0Mi", dec(0, 0), BINARY_SI),
    ("0M", dec(0, 0), DECIMAL_SI),
    ("0Gi", dec(0, 0), BINARY_SI),
    ("0G", dec(0, 0), DECIMAL_SI),
    ("0Ti", dec(0, 0), BINARY_SI),
    ("0T", dec(0, 0), DECIMAL_SI),
    ("1", dec(1, 0), DECIMAL_SI),
    ("1Ki", dec(KIB, 0), BINARY_SI),
    ("8Ki", dec(8 * KIB, 0), BINARY_SI),
    ("7Mi", dec(7 * KIB**2, 0), BINARY_SI),
    ("6Gi", dec(6 * KIB**3, 0), BINARY_SI),
    ("5Ti", dec(5 * KIB**4, 0), BINARY_SI),
    ("4Pi", dec(4 * KIB**5, 0), BINARY_SI),
    ("3Ei", dec(3 * KIB**6, 0), BINARY_SI),
    ("10Ti", dec(10 * KIB**4, 0), BINARY_SI),
    ("100Ti", dec(100 * KIB**4, 0), BINARY_SI),
    ("5n", dec(5, -9), DECIMAL_SI),
    ("4u", dec(4, -6), DECIMAL_SI),
    ("3m", dec(3, -3), DECIMAL_SI),
    ("9", dec(9, 0), DECIMAL_SI),
    ("8k", dec(8, 3), DECIMAL_SI),
    ("50k", dec(5, 4), DECIMAL_SI),
    ("7M", dec(7, 6), DECIMAL_SI),
    ("6G", dec(6, 9), DECIMAL_SI),
    ("5T", dec(5, 12), DECIMAL_SI),
    ("40T", dec(4, 13), DECIMAL_SI),
    ("300T", dec(3, 14), DECIMAL_SI),
    ("2P", dec(2, 15), DECIMAL_SI),
    ("1E", dec(1, 18), DECIMAL_SI),
    ("1E-3", dec(1, -3), DECIMAL_EXPONENT),
    ("1e3", dec(1, 3), DECIMAL_EXPONENT),
    ("1E6", dec(1, 6), DECIMAL_EXPONENT),
    ("1e9", dec(1, 9), DECIMAL_EXPONENT),
    ("1E12", dec(1, 12), DECIMAL_EXPONENT),
    ("1e15", dec(1, 15), DECIMAL_EXPONENT),
    ("1E18", dec(1, 18), DECIMAL_EXPONENT),
    ("1e14", dec(1, 14), DECIMAL_EXPONENT),
    ("1e13", dec(1, 13), DECIMAL_EXPONENT),
    ("100.035k", dec(100035, 0), DECIMAL_SI),
    ("0.001", dec(1, -3), DECIMAL_SI),
    ("0.0005k", dec(5, -1), DECIMAL_SI),
    ("0.005", dec(5, -3), DECIMAL_SI),
    ("0.05", dec(5, -2), DECIMAL_SI),
    ("0.5", dec(5, -1), DECIMAL_SI),
    ("0.00050k", dec(5, -1), DECIMAL_SI),
    ("0.00500", dec(5, -3), DECIMAL_SI),
    ("0.05000", dec(5, -2), DECIMAL_SI),
    ("0.50000", dec(5, -1), DECIMAL_SI),
    ("0.5e0", dec(5, -1), DECIMAL_EXPONENT),
    ("0.5e-1", dec(5, -2), DECIMAL_EXPONENT),
    ("0.5e-2", dec(5, -3), DECIMAL_EXPONENT),
    ("10.035M", dec(10035, 3), DECIMAL_SI),
    ("1.2e3", dec(12, 2), DECIMAL_EXPONENT),
    ("1.3E+6", dec(13, 5), DECIMAL_EXPONENT),
    ("1.40e9", dec(14, 8), DECIMAL_EXPONENT),
    ("1.53E12", dec(153, 10), DECIMAL_EXPONENT),
    ("1.6e15", dec(16, 14), DECIMAL_EXPONENT),
    ("1.7E18", dec(17, 17), DECIMAL_EXPONENT),
    ("9.01", dec(901, -2), DECIMAL_SI),
    ("8.1k", dec(81, 2), DECIMAL_SI),
    ("7.123456M", dec(7123456, 0), DECIMAL_SI),
    ("6.987654321G", dec(6987654321, 0), DECIMAL_SI),
    ("5.444T", dec(5444, 9), DECIMAL_SI),
    ("40.1T", dec(401, 11), DECIMAL_SI),
    ("300.2T", dec(3002, 11), DECIMAL_SI),
    ("2.5P", dec(25, 14), DECIMAL_SI),
    ("1.01E", dec(101, 16), DECIMAL_SI),
    # things that saturate or round up
    ("3.001n", dec(4, -9), DECIMAL_SI),
    ("1.1E-9", dec(2, -9), DECIMAL_EXPONENT),
    ("0.0000000001", dec(1, -9), DECIMAL_SI),
    ("0.0000000005", dec(1, -9), DECIMAL_SI),
    ("0.00000000050", dec(1, -9), DECIMAL_SI),
    ("0.5e-9", dec(1, -9), DECIMAL_EXPONENT),
    ("0.9n", dec(1, -9), DECIMAL_SI),
    ("0.00000012345", dec(124, -9), DECIMAL_SI),
    ("0.00000012354", dec(124, -9), DECIMAL_SI),
    ("9Ei", dec(INT64_MAX, 0), BINARY_SI),
    ("9223372036854775807Ki", dec(INT64_MAX, 0), BINARY_SI),
    ("12E", dec(12, 18), DECIMAL_SI),
    # fractional binary
    ("100.035Ki", dec(10243584, -2), BINARY_SI),
    ("0.5Mi", dec(KIB * KIB // 2, 0), BINARY_SI),
    ("0.05Gi", dec(536870912, -1), BINARY_SI),
    ("0.025Ti", dec(274877906944, -1), BINARY_SI),
    # "things written by trolls"
    ("0.000000000001Ki", dec(2, -9), DECIMAL_SI),
    (".001", dec(1, -3), DECIMAL_SI),
    (".0001k", dec(100, -3), DECIMAL_SI),
    ("1.", dec(1, 0), DECIMAL_SI),
    ("1.G", dec(1, 9), DECIMAL_SI),
    # the scanner's own table: a bare dot or sign is zero
    (".", dec(0, 0), DECIMAL_SI),
    ("-.", dec(0, 0), DECIMAL_SI),
]

# Kubernetes' invalid list, plus its empty-string and suffix-bounds cases.
REJECTED = [
    "",
    "1.1.M",
    "1+1.0M",
    "0.1mi",
    "0.1am",
    "aoeu",
    ".5i",
    "1i",
    "-3.01i",
    "-3.01e-",
    "1e4294967297",
    " 1",
    "1 ",
    "1K",
    "1e",
    "1E2147483648",
    "1E-2147483648",
    "Non-Numeric",
    "8 k",
    "８",  # noqa: RUF001 (a full-width digit must be refused, as Kubernetes does)
    "1e3e3",
]


@pytest.mark.parametrize(("text", "amount", "fmt"), PARSED)
def test_a_quantity_parses_to_the_amount_and_format_kubernetes_gives_it(text, amount, fmt):
    q = parse_quantity(text)
    assert (q.amount, q.format) == (amount, fmt)


@pytest.mark.parametrize(("text", "amount", "fmt"), [p for p in PARSED if p[1] != 0])
def test_a_signed_quantity_keeps_its_amount_and_format(text, amount, fmt):
    assert parse_quantity("-" + text).amount == -amount
    assert parse_quantity("+" + text).amount == amount
    assert parse_quantity("-" + text).format == fmt


@pytest.mark.parametrize("text", REJECTED)
def test_text_kubernetes_rejects_is_not_a_quantity(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("text", "exact"),
    [
        ("8k", 8000),
        ("8000", 8000),
        ("1e3", 1000),
        ("30Ki", 30720),
        ("0.5k", 500),
        ("1.5", None),
        ("12E", None),
        ("100m", None),
        ("9Ei", INT64_MAX),
        ("1e40", None),
    ],
)
def test_as_int64_is_the_exact_integer_or_nothing(text, exact):
    assert parse_quantity(text).as_int64() == exact


@pytest.mark.parametrize(
    ("text", "value"),
    [("9.01", 10), ("100m", 1), ("8k", 8000), ("1n", 1), ("0", 0), ("-9.01", -10), ("1e40", INT64_MAX)],
)
def test_value_rounds_up_to_an_integer(text, value):
    assert parse_quantity(text).value() == value


def test_hostile_text_is_refused_or_bounded_without_expanding_it():
    assert parse_quantity("1e2147483647").as_int64() is None
    assert parse_quantity("1e-2147483647").amount == dec(1, -9)
    with pytest.raises(QuantityError, match="longer than"):
        parse_quantity("1" * 10_000)
    with pytest.raises(QuantityError, match="must be a string"):
        parse_quantity(8000)  # type: ignore[arg-type]
