"""The scheduler bench's profiles file, and the per-profile percentageOfNodesToScore lever.

KubeSchedulerProfile (kubescheduler.config.k8s.io/v1) has `percentageOfNodesToScore` of its
own, which overrides the configuration's global one (upstream
staging/src/k8s.io/kube-scheduler/config/v1/types.go). So the steer-* profiles can stop
looking for feasible nodes sooner without touching default-scheduler.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

STEER_PROFILE_PREFIX = "steer-"
# pkg/scheduler/schedule_one.go: below this many nodes every node is evaluated, and never
# fewer than this many are looked for; the adaptive percentage never goes below 5.
MIN_FEASIBLE_NODES = 100
MIN_ADAPTIVE_PERCENTAGE = 5


def with_steer_percentage(config: Mapping[str, Any], percentage: int) -> dict[str, Any]:
    """A copy of a KubeSchedulerConfiguration with `percentageOfNodesToScore` set on every
    profile whose schedulerName starts with `steer-` (default-scheduler left as it is).
    Raises ValueError when no profile is a steer-* one."""
    out = copy.deepcopy(dict(config))
    steered = [
        p
        for p in out.get("profiles") or ()
        if str(p.get("schedulerName", "")).startswith(STEER_PROFILE_PREFIX)
    ]
    if not steered:
        raise ValueError(f"no profile's schedulerName starts with {STEER_PROFILE_PREFIX!r}")
    for profile in steered:
        profile["percentageOfNodesToScore"] = percentage
    return out


def write_profiles(source: Path, percentage: int | None, workdir: Path) -> Path:
    """`source` itself, or (with a percentage) its copy in `workdir` with the steer-* profiles'
    percentageOfNodesToScore set."""
    if percentage is None:
        return source
    config = with_steer_percentage(yaml.safe_load(source.read_text()), percentage)
    path = workdir / f"profiles-steer-{percentage}pct.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def profile_percentages(path: Path) -> dict[str, int | None]:
    """Per profile, its percentageOfNodesToScore (None: the global one), and under "" the
    global one (None: the adaptive default)."""
    config = yaml.safe_load(path.read_text())
    out: dict[str, int | None] = {"": config.get("percentageOfNodesToScore")}
    for profile in config.get("profiles") or ():
        out[str(profile.get("schedulerName", "default-scheduler"))] = profile.get(
            "percentageOfNodesToScore"
        )
    return out


def nodes_to_find(percentage: int | None, nodes: int) -> int:
    """How many feasible nodes the scheduler looks for before it scores (upstream
    numFeasibleNodesToFind): every node under 100; else the percentage of them (0 or None:
    50 - nodes/125, at least 5), and never fewer than 100 (nor more than there are)."""
    if nodes < MIN_FEASIBLE_NODES:
        return nodes
    pct = percentage or 0
    if pct == 0:
        pct = max(50 - nodes // 125, MIN_ADAPTIVE_PERCENTAGE)
    return min(max(nodes * pct // 100, MIN_FEASIBLE_NODES), nodes)


def nodes_to_find_by_profile(path: Path, nodes: int) -> dict[str, int]:
    """Per profile of a profiles file, `nodes_to_find` at `nodes` nodes (a profile without a
    percentage of its own takes the global one)."""
    percentages = profile_percentages(path)
    default = percentages.pop("")
    return {
        name: nodes_to_find(default if pct is None else pct, nodes)
        for name, pct in percentages.items()
    }
