"""Kubernetes quantities parse to exact fractions, and bad ones say what is wrong."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from steer.core.quantity import MAX_QUANTITY, QuantityError, format_ratio, parse_quantity


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Fraction(1, 10)),
        ("8Gi", 8 * 2**30),
        ("1e3", 1000),
        ("1E3", 1000),
        ("2k", 2000),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("5.", 5),
        ("2e-3", Fraction(2, 1000)),
        ("1Ki", 1024),
        ("1Mi", 2**20),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("1Ei", 2**60),
        ("1E", 10**18),  # exa, not an exponent
        ("3M", 3 * 10**6),
        ("1G", 10**9),
        ("1T", 10**12),
        ("1P", 10**15),
        ("250u", Fraction(250, 10**6)),
        ("7n", Fraction(7, 10**9)),
        ("+3", 3),
        ("-1", -1),
        ("0", 0),
        (2, 2),
        (0.1, Fraction(1, 10)),  # read through its decimal text, not the binary float
    ],
)
def test_parses_exactly(text: str | int | float, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["", " 1", "1 ", "abc", "1e", "1.2.3", "m", "1KiB", "1ki", "e3", "1e3.5", "nan"]
)
def test_rejects_with_the_input_and_examples(text: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert repr(text) in str(info.value)
    assert "'250m'" in str(info.value)


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}])
def test_rejects_non_quantity_types(value: object) -> None:
    with pytest.raises(QuantityError, match="must be a quantity string"):
        parse_quantity(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # The apiserver caps a quantity at 2^63 - 1 (its dry-run accepts every one of these),
        # so a limit the validator could not read would let a tenant pod through.
        ("1e1000000000", MAX_QUANTITY),
        ("1e100", MAX_QUANTITY),
        ("-1e100", -MAX_QUANTITY),
        ("9" * 5000, MAX_QUANTITY),  # more digits than Python's int() takes
        ("8Ei", MAX_QUANTITY),  # 2^63
        ("7Ei", 7 * 2**60),
        # ... and rounds a non-zero amount away from zero to a multiple of 10^-9.
        ("0.1n", Fraction(1, 10**9)),
        ("0." + "0" * 5000 + "1", Fraction(1, 10**9)),
        ("1.0000000001", Fraction(1_000_000_001, 10**9)),
        ("1e-20", Fraction(1, 10**9)),
        ("0.000", Fraction(0)),
    ],
)
def test_values_the_apiserver_stores_are_read_as_it_reads_them(text: str, value: Fraction) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["1e2147483648", "1e99999999999", "1e-2147483648"])
def test_an_exponent_beyond_32_bits_is_refused_as_the_apiserver_refuses_it(text: str) -> None:
    with pytest.raises(QuantityError, match="out of range"):
        parse_quantity(text)


@given(st.integers(0, 10**12), st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi"]))
def test_milli_and_binary_scale(n: int, suffix: str) -> None:
    scale: dict[str, Fraction | int] = {
        "": 1,
        "m": Fraction(1, 1000),
        "k": 1000,
        "M": 10**6,
        "G": 10**9,
        "Ki": 1024,
        "Mi": 2**20,
        "Gi": 2**30,
    }
    assert parse_quantity(f"{n}{suffix}") == min(n * scale[suffix], MAX_QUANTITY)  # the cap


def test_format_ratio() -> None:
    assert format_ratio(Fraction(21, 20)) == "1.05"
    assert format_ratio(Fraction(2)) == "2.00"
