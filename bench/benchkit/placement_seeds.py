"""Which traces a placement bench invocation replays: one seed per run, the same seed for every
mode of a run (so stock and steered of one pair place the same arrivals), another seed for each
run (so the arrival order, the gaps and the sizes vary from run to run, and where in the trace
the scorer's next cycle falls).
"""

from __future__ import annotations

import random


class SeedError(ValueError):
    """A `--seeds` text that names no seed, or names one twice."""


def parse_seeds(text: str) -> list[int]:
    """`--seeds`: comma-separated seeds and inclusive ranges, in the order given:
    "1-5" -> [1, 2, 3, 4, 5], "7,3,10-11" -> [7, 3, 10, 11]."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        first, dash, last = part.partition("-")
        try:
            low = int(first)
            high = int(last) if dash else low
        except ValueError:
            raise SeedError(f"--seeds: {part!r} is not a seed (N) or a range (N-M)") from None
        if high < low:
            raise SeedError(f"--seeds: the range {part!r} runs backwards; write {high}-{low}")
        seeds += range(low, high + 1)
    if not seeds:
        raise SeedError(f"--seeds: {text!r} names no seed")
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise SeedError(f"--seeds: {text!r} names seed {twice[0]} twice")
    return seeds


def run_seeds(seeds: str | None, runs: int | None, seed: int) -> list[int]:
    """The seed of each run: `--seeds` as given, else `--runs` N from `--seed` on (seed,
    seed + 1, ..., seed + N - 1; 3 runs when neither is given)."""
    if seeds is not None:
        if runs is not None:
            raise SeedError("--seeds and --runs both say how many runs: give one of them")
        return parse_seeds(seeds)
    count = 3 if runs is None else runs
    if count < 1:
        raise SeedError(f"--runs: at least 1, got {count}")
    return list(range(seed, seed + count))


def cycle_in_trace(seed: int, span_s: float, interval_s: float) -> float:
    """When, in seconds after the first arrival, the scorer's next cycle should fall: a point
    drawn per seed within the trace's span (at most one interval). A cycle between two arrivals
    of a burst republishes labels the rest of the burst reads (issue 41: the DRA burst spread
    once the first jobs made their nodes look busier); one after the last arrival never does."""
    return random.Random(f"scorer-cycle-{seed}").uniform(0.0, min(span_s, interval_s))
