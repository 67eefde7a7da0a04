"""Kubernetes resource quantities ("100m", "8Gi", "1e3", "2k") as exact fractions.

An overcommit budget compares limit/request ratios: float parsing would let "1.1" CPUs and a
5 % budget round either way, so every quantity becomes a `Fraction` and comparisons are exact.
The grammar is the apiserver's (`k8s.io/apimachinery/pkg/api/resource`):

    quantity        ::= signedNumber suffix
    suffix          ::= binarySI | decimalSI | decimalExponent
    binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI       ::= n | u | m | "" | k | M | G | T | P | E
    decimalExponent ::= ("e" | "E") signedNumber
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# An "E" alone is exa; "E" followed by digits is an exponent: try the exponent form first.
_QUANTITY_RE = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:[eE](?P<exponent>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$"
)
# The apiserver refuses exponents this large; refusing them here keeps Fraction arithmetic
# from building a number with a billion digits out of a 10-byte string.
_MAX_EXPONENT = 1000


class QuantityError(ValueError):
    """Not a Kubernetes quantity; the message quotes the input and shows valid forms."""


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity: `parse_quantity("100m") == Fraction(1, 10)`.

    Integers and floats (a hand-written AdmissionReview may carry `cpu: 2`) are read through
    their decimal text, so `0.1` is one tenth, not the nearest binary float. Strings are
    cached (a cluster's pods repeat a few hundred distinct quantities, and the scorer reduces
    every one of 100,000 pods on its first list)."""
    if isinstance(text, str) and len(text) <= _CACHED_LENGTH:
        return _parse_cached(text)
    return _parse(text)


# Longer strings are parsed each time (and cannot fill the cache with hostile input).
_CACHED_LENGTH = 32


@functools.lru_cache(maxsize=4096)
def _parse_cached(text: str) -> Fraction:
    return _parse(text)


def _parse(text: str | int | float) -> Fraction:
    if isinstance(text, bool) or not isinstance(text, str | int | float):
        raise QuantityError(f"must be a quantity string such as '500m' or '2Gi', got {text!r}")
    raw = text if isinstance(text, str) else repr(text)
    match = _QUANTITY_RE.match(raw)
    if match is None:
        raise QuantityError(
            f"{raw!r} is not a quantity: expected a number with an optional suffix "
            "(m, k, M, G, T, Ki, Mi, Gi, Ti or an exponent such as 1e3), e.g. '250m', '8Gi'"
        )
    value = Fraction(match["number"])
    if match["exponent"] is not None:
        exponent = int(match["exponent"])
        if abs(exponent) > _MAX_EXPONENT:
            raise QuantityError(f"{raw!r}: exponent {exponent} is out of range")
        return value * Fraction(10) ** exponent
    suffix = match["suffix"] or ""
    if suffix in _BINARY:
        return value * (1 << (10 * _BINARY[suffix]))
    return value * Fraction(10) ** _DECIMAL[suffix]


def format_ratio(value: Fraction) -> str:
    """A ratio for a message: two decimals, enough to see 1.05 against a 5 % budget."""
    return f"{float(value):.2f}"
