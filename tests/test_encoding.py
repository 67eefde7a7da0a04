"""Score maths: bounds, hysteresis, and the preference terms that reproduce the score order."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from steer.core.encoding import (
    bucket_values,
    composite,
    normalise,
    preference_terms,
    preference_weight,
    quantise,
    quantise_raw,
)

STEPS = st.sampled_from([1, 2, 4, 5, 10, 20, 25, 50, 100])
ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True)
FINITE = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False)
SCORES = st.floats(min_value=0, max_value=100, allow_nan=False)


def test_normalise_min_max_and_direction() -> None:
    raw = {"a": 10.0, "b": 20.0, "c": 30.0}
    assert normalise(raw, higher_is_better=True) == {"a": 0.0, "b": 50.0, "c": 100.0}
    assert normalise(raw, higher_is_better=False) == {"a": 100.0, "b": 50.0, "c": 0.0}


def test_normalise_fixed_bounds_clamp() -> None:
    raw = {"a": -5.0, "b": 45.0, "c": 150.0}
    assert normalise(raw, higher_is_better=False, bounds=(0, 100)) == {
        "a": 100.0,
        "b": 55.0,
        "c": 0.0,
    }


def test_normalise_drops_non_finite_and_neutral_when_flat() -> None:
    raw = {"a": math.nan, "b": 7.0, "c": 7.0, "d": math.inf}
    assert normalise(raw, higher_is_better=True) == {"b": 50.0, "c": 50.0}
    assert normalise({"a": math.nan}, higher_is_better=True) == {}


@given(st.dictionaries(st.text(min_size=1, max_size=3), ANY_FLOAT, max_size=20), st.booleans())
def test_normalised_scores_always_within_0_100(raw: dict[str, float], higher: bool) -> None:
    for bounds in (None, (0.0, 1.0), (-10.0, 10.0)):
        scores = normalise(raw, higher_is_better=higher, bounds=bounds)
        assert set(scores) == {n for n, v in raw.items() if math.isfinite(v)}
        assert all(0.0 <= s <= 100.0 for s in scores.values())


@given(
    ANY_FLOAT.filter(lambda v: not math.isnan(v)),
    STEPS,
    st.none() | st.integers(0, 100),
    st.floats(0, 49),
)
def test_quantised_bucket_is_a_label_value(
    score: float, step: int, previous: int | None, hyst: float
) -> None:
    if previous is not None:
        previous -= previous % step
    bucket = quantise(score, step, previous, hyst)
    assert bucket in bucket_values(step)


@given(SCORES, STEPS)
def test_quantise_without_history_is_nearest_bucket(score: float, step: int) -> None:
    bucket = quantise(score, step)
    assert abs(bucket - score) <= step / 2 + 1e-9


def test_quantise_hysteresis_holds_near_edge() -> None:
    # 44.9 rounds to 40; crossing the 45 edge by less than the 3-point margin keeps 40.
    assert quantise(44.9, 10) == 40
    assert quantise(47.9, 10, previous=40, hysteresis=3) == 40
    assert quantise(48.1, 10, previous=40, hysteresis=3) == 50
    assert quantise(42.1, 10, previous=50, hysteresis=3) == 50
    assert quantise(41.9, 10, previous=50, hysteresis=3) == 40
    assert quantise(41.9, 10, previous=40, hysteresis=3) == 40


@given(
    SCORES,
    STEPS,
    st.floats(min_value=0.5, max_value=20),
    st.lists(st.floats(min_value=0, max_value=1), min_size=1, max_size=50),
)
def test_hysteresis_never_flaps_on_noise_smaller_than_margin(
    centre: float, step: int, margin: float, jitter: list[float]
) -> None:
    """Samples spread over less than the margin never change the label after the first one."""
    assume(margin < step)
    samples = [min(100.0, max(0.0, centre + (j - 0.5) * margin * 0.999)) for j in jitter]
    label = quantise(samples[0], step)
    for sample in samples[1:]:
        assert quantise(sample, step, label, margin) == label


def test_quantise_raw_never_understates() -> None:
    assert quantise_raw(4.2, 1) == 5
    assert quantise_raw(5.0, 1) == 5
    assert quantise_raw(-12.0, 1) == 0
    # Rises at once, falls only after the hysteresis.
    assert quantise_raw(5.3, 1, previous=5, hysteresis=0.5) == 6
    assert quantise_raw(4.6, 1, previous=6, hysteresis=0.5) == 6
    assert quantise_raw(4.4, 1, previous=6, hysteresis=0.5) == 5


@given(
    st.floats(-100, 1000, allow_nan=False),
    st.sampled_from([1, 2, 5, 10]),
    st.none() | st.integers(0, 1000),
    st.floats(0, 5),
)
def test_quantise_raw_label_is_at_least_the_value(
    value: float, step: int, previous: int | None, hyst: float
) -> None:
    if previous is not None:
        previous -= previous % step
    assert quantise_raw(value, step, previous, hyst) >= value - 1e-6


def test_composite_weighted_mean_over_present_dimensions() -> None:
    assert composite({"a": 100.0, "b": 0.0}, {"a": 3, "b": 1}) == 75.0
    assert composite({"a": 40.0}, {"a": 3, "b": 1}) == 40.0
    assert composite({"c": 40.0}, {"a": 3, "b": 1}) is None
    assert composite({"a": 40.0, "b": 10.0}, {"a": 0, "b": 2}) == 10.0


def test_preference_terms_for_step_10_are_the_measured_10_20_40_80() -> None:
    terms = preference_terms("kube-steer.github.io/score", 10)
    assert [t.weight for t in terms] == [10, 20, 40, 80]
    assert terms[0].values == ("10", "30", "50", "70", "90")
    assert terms[3].values == ("80", "90", "100")
    assert terms[0].to_k8s() == {
        "weight": 10,
        "preference": {
            "matchExpressions": [
                {
                    "key": "kube-steer.github.io/score",
                    "operator": "In",
                    "values": ["10", "30", "50", "70", "90"],
                }
            ]
        },
    }


@pytest.mark.parametrize("step", [1, 2, 4, 5, 10, 20, 25, 50, 100])
def test_term_weights_sum_to_the_bucket_and_stay_within_api_limits(step: int) -> None:
    terms = preference_terms("k", step)
    assert all(1 <= t.weight <= 100 for t in terms)
    for value in bucket_values(step):
        assert preference_weight({"k": str(value)}, terms) == value
    assert preference_weight({}, terms) == 0
    assert preference_weight({"k": "not-a-bucket"}, terms) == 0


@given(STEPS, st.data())
def test_terms_rank_nodes_exactly_as_the_quantised_score(step: int, data: st.DataObject) -> None:
    a, b = data.draw(SCORES), data.draw(SCORES)
    qa, qb = quantise(a, step), quantise(b, step)
    terms = preference_terms("kube-steer.github.io/score", step)
    wa = preference_weight({"kube-steer.github.io/score": str(qa)}, terms)
    wb = preference_weight({"kube-steer.github.io/score": str(qb)}, terms)
    assert (wa > wb) == (qa > qb) and (wa == wb) == (qa == qb)
