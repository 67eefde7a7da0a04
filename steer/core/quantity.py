"""Kubernetes resource quantities ("100m", "8Gi", "1e3", "2k") as exact fractions, read the way
the apiserver reads them.

An overcommit budget compares limit/request ratios: float parsing would let "1.1" CPUs and a
5 % budget round either way, so every quantity becomes a `Fraction` and comparisons are exact.
The grammar is the apiserver's (`k8s.io/apimachinery/pkg/api/resource`):

    quantity        ::= signedNumber suffix
    suffix          ::= binarySI | decimalSI | decimalExponent
    binarySI        ::= Ki | Mi | Gi | Ti | Pi | Ei
    decimalSI       ::= n | u | m | "" | k | M | G | T | P | E
    decimalExponent ::= ("e" | "E") signedNumber

and its limits (`ParseQuantity`): the exponent must fit in 32 bits; the value is rounded away
from zero to a multiple of 10^-9 (a non-zero amount is never read as zero) and capped at
2^63 - 1 in magnitude. So every quantity the apiserver stores has a value here, and none is so
large or so long that arithmetic on it fails or takes long: "1e1000000000" is 2^63 - 1, a
5,000-digit number is read without Python's int-conversion limit.
"""

from __future__ import annotations

import decimal
import functools
import re
from collections.abc import Mapping
from decimal import Decimal
from fractions import Fraction

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# An "E" alone is exa; "E" followed by digits is an exponent: try the exponent form first.
_QUANTITY_RE = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?:[eE](?P<exponent>[+-]?[0-9]+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?)$"
)
# The apiserver parses the exponent as a 32-bit integer and refuses any other.
_MAX_EXPONENT = 2**31 - 1
# Its cap, in the quantity's base unit, and its precision (10^-9).
MAX_QUANTITY = 2**63 - 1
_NANO = Decimal("1e-9")
# Enough digits for every value within the cap to the nano (19 + 9), with room; rounding the
# rest toward the ceiling cannot cross a multiple of 10^-9 (those have at most 28 digits).
_CONTEXT = decimal.Context(prec=80, rounding=decimal.ROUND_CEILING, Emax=2**40, Emin=-(2**40))


def parse_amounts(texts: Mapping[str, str]) -> dict[str, Fraction]:
    """A Node's `status.allocatable` (or any name -> quantity map) read once, where it enters:
    each name's exact amount. A quantity that does not parse is left out, as if the node did
    not offer it (the apiserver validates Node status, so only a hand-made object has one)."""
    out = {}
    for name, text in texts.items():
        try:
            out[name] = parse_quantity(text)
        except QuantityError:
            continue
    return out


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
    number = match["number"]
    negative = number.startswith("-")
    scale = 0  # power of ten
    binary = 0  # power of 1024
    if match["exponent"] is not None:
        text_exponent = match["exponent"].lstrip("+-").lstrip("0") or "0"
        if len(text_exponent) > 10 or int(text_exponent) > _MAX_EXPONENT:
            raise QuantityError(f"{raw!r}: exponent {match['exponent']} is out of range")
        scale = int(match["exponent"])
    else:
        suffix = match["suffix"] or ""
        if suffix in _BINARY:
            binary = _BINARY[suffix]
        else:
            scale = _DECIMAL[suffix]
    magnitude = abs(_CONTEXT.create_decimal(number.lstrip("+-")))
    if magnitude == 0:
        return Fraction(0)
    magnitude = magnitude.scaleb(scale, _CONTEXT)
    if binary:
        magnitude = _CONTEXT.multiply(magnitude, Decimal(1 << (10 * binary)))
    if magnitude.adjusted() > 19 or magnitude > MAX_QUANTITY:
        value = Fraction(MAX_QUANTITY)
    else:
        # Away from zero to a multiple of 10^-9, as the apiserver rounds (inf.RoundUp).
        value = Fraction(max(magnitude, _NANO).quantize(_NANO, decimal.ROUND_CEILING, _CONTEXT))
    return -value if negative else value


def format_ratio(value: Fraction) -> str:
    """A ratio for a message: two decimals, enough to see 1.05 against a 5 % budget."""
    return f"{float(value):.2f}"
