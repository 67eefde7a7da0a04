"""The scheduler bench's markdown scoreboard, from its results document."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .nodes import GPU
from .placement_quality import SHARES
from .scheduler_metrics import CPU_POINTS, POINTS
from .shapes import BARE, OPTIONS, PAIRS, REALISTIC, SHAPES, Pair, Shape


def trio(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def pairs_run(size: Mapping[str, Any]) -> list[Pair]:
    """The pairs a size's runs include (older results files: the bare pair alone)."""
    variants = {r["variant"] for r in size["runs"]}
    return [p for p in PAIRS if variants & set(p.variants)]


def round_pairs(
    runs: Sequence[Mapping[str, Any]],
    shape: str,
    get: Callable[[Mapping[str, Any]], Any],
    pair: Pair = BARE,
) -> list[tuple[float, float]]:
    """Per round, (twin, steered) of `get(run)` for the shape and pair, where both runs have
    it."""
    by_round: dict[int, dict[str, Any]] = {}
    for r in runs:
        if r["shape"] == shape and "error" not in r:
            by_round.setdefault(r["round"], {})[r["variant"]] = get(r)
    return [
        (values[pair.twin], values[pair.steered])
        for values in by_round.values()
        if values.get(pair.twin) is not None and values.get(pair.steered) is not None
    ]


def shape_summary(size: Mapping[str, Any], shape: str, pair: Pair = BARE) -> dict[str, Any]:
    runs = [r for r in size["runs"] if r["shape"] == shape and "error" not in r]
    runs = [r for r in runs if r["variant"] in pair.variants]
    ratios = [
        steered / twin
        for twin, steered in round_pairs(runs, shape, lambda r: r["pods_per_s"], pair)
        if twin > 0
    ]
    return {
        "steered_pods_per_s": [r["pods_per_s"] for r in runs if r["variant"] == pair.steered],
        "twin_pods_per_s": [r["pods_per_s"] for r in runs if r["variant"] == pair.twin],
        "ratios": [round(x, 3) for x in ratios],
        "ratio_min": round(min(ratios), 3) if ratios else None,
        "ratio_median": round(statistics.median(ratios), 3) if ratios else None,
        "unbound": sum(r["pods"] - r["bound"] for r in runs),
        # Per variant, each measure of placement quality per run (None: not measured).
        "placement": {
            role: {
                name: [(r.get("placement") or {}).get(name) for r in runs if r["variant"] == v]
                for name in PLACEMENT_MEASURES
            }
            for role, v in (("twin", pair.twin), ("steered", pair.steered))
        },
    }


# What the JSON summary keeps of each run's placement quality (bench/benchkit/
# placement_quality.py).
PLACEMENT_MEASURES = (
    *SHARES,
    "mean_bound_score",
    "mean_eligible_score",
    "off_eligible",
)


def steered_pod(entry: Mapping[str, Any], pair: Pair) -> Mapping[str, Any]:
    """The pair's steered pod in a size's `pods` entry of the results."""
    pod: Mapping[str, Any] = entry["steered"] if pair == BARE else entry["realistic"]["steered"]
    return pod


def injected(spec: Mapping[str, Any]) -> str:
    """What the steered pod carries that the scheduler evaluates (the user's own included)."""
    names = {
        name
        for c in spec["containers"]
        for name in ((c.get("resources") or {}).get("requests") or {})
    }
    extended = sum(1 for k in names if "/" in k and k != GPU)
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {}
    preferred = len(node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ())
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = len(required["nodeSelectorTerms"]) if required else 0
    anti = len(
        (affinity.get("podAntiAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or ()
    )
    spread = len(spec.get("topologySpreadConstraints") or ())
    tolerations = len(spec.get("tolerations") or ())
    text = f"{preferred} pref, {terms} req terms, {extended} resources"
    if anti:
        text += f", {anti} anti-aff"
    if spread:
        text += f", {spread} spread"
    if tolerations:
        text += f", {tolerations} tol"
    return text


def throughput_table(
    size: Mapping[str, Any], shapes: Sequence[Shape], goal: float, pair: Pair = BARE
) -> str:
    """Per shape, twin and steered pods/s of the pair and their ratio per round. The
    realistic table also gives the pods' size and both schedulers (its twin is
    default-scheduler's)."""
    realistic = pair == REALISTIC
    if realistic:
        title = (
            f"Realistic pods at {size['nodes']} nodes, pods/s (min / median / max over rounds): "
            "the twin is the pod as the user created it (a Deployment's, 5-8 KiB; "
            "default-scheduler), the steered pod is it mutated; ratio = realistic-steered / "
            "realistic-twin of the same round."
        )
        head = "| shape | scheduler | injected | JSON bytes | twin pods/s | steered pods/s |"
        rule = "|---|---|---|---:|---:|---:|"
    else:
        title = (
            f"Scheduling throughput at {size['nodes']} nodes, pods/s (min / median / max over "
            "rounds); ratio = steered / twin of the same round."
        )
        head = "| shape | scheduler | injected | twin pods/s | steered pods/s |"
        rule = "|---|---|---|---:|---:|"
    lines = [
        title,
        "",
        f"{head} ratio | ≥ {goal}x | algorithm µs/pod | unbound |",
        f"{rule}---:|:-:|---:|---:|",
    ]
    runs = [r for r in size["runs"] if "scheduler" in r]
    for shape in shapes:
        s = shape_summary(size, shape.name, pair)
        entry = size["pods"][shape.name]
        spec = steered_pod(entry, pair)["spec"]
        scheduler = spec.get("schedulerName", "default-scheduler")
        cells = [shape.name, scheduler, injected(spec)]
        if realistic:
            twin = entry["realistic"]["twin"]["spec"].get("schedulerName", "default-scheduler")
            cells[1] = f"{twin} → {scheduler}"
            sizes = entry["realistic"]
            cells.append(f"{sizes['twin_bytes']} → {sizes['steered_bytes']}")
        median = s["ratio_median"]
        verdict = "-" if median is None else ("yes" if median >= goal else "**no**")
        cells += [
            trio(s["twin_pods_per_s"], "{:.0f}"),
            trio(s["steered_pods_per_s"], "{:.0f}"),
            trio(s["ratios"]),
            verdict,
            pair_cells(runs, [shape], metric("algorithm_us"), pair=pair)[0],
            str(s["unbound"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def placement(name: str, scale: float = 1.0) -> Callable[[Mapping[str, Any]], Any]:
    """A getter of one measure of a run's placement quality, times `scale` (or None)."""

    def get(r: Mapping[str, Any]) -> Any:
        value = (r.get("placement") or {}).get(name)
        return None if value is None else value * scale

    return get


# The placement table's shares: name and ceiling in the run's placement quality.
PLACEMENT_SHARES = (
    ("best_share", "best_ceiling"),
    ("top2_share", "top2_ceiling"),
    ("preferred_share", "preferred_ceiling"),
)


def placement_table(size: Mapping[str, Any], shapes: Sequence[Shape]) -> str:
    """Per shape and pair, where the pods were bound by the score label and the preferred
    terms of the shape's steered pod, twin → steered (median over rounds): shares of the bound
    pods with the steered run's ceiling, mean label value of the bound and eligible nodes."""
    lines = [
        f"Placement quality at {size['nodes']} nodes, twin → steered (median over rounds), "
        "judged by the shape's steered pod (the twin too, for reference): % of bound pods on a "
        "node of the best bucket of its score label among the nodes eligible for the run's "
        "pod, of the best two buckets (best - 10 and up), and on a node its preferred terms "
        "score most (the label and, for a non-GPU pod, not reserved for GPU pods); (≤ N) = the "
        "most the steered share could be: the room those nodes have for the pod over the pods "
        "bound. Mean label value of the bound nodes and of the eligible nodes; off = pods on a "
        "node called ineligible (0 expected). Eligible, approximately: allocatable covers the "
        "pod's requests (GPU, pools, gates) and its NoSchedule taints are tolerated "
        "(unhealthy); the run's own use of the nodes, spread constraints and the scheduler's "
        "other scores not counted. · where not measured.",
        "",
        "| shape | pair | label | best bucket: nodes / eligible | best-bucket % | top-2 % "
        "| preferred % | mean bound | mean eligible | off |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    runs = [r for r in size["runs"] if "scheduler" in r]
    keys = size.get("score_keys") or {}
    for shape in shapes:
        for pair in pairs_run(size):
            steered = [
                r
                for r in runs
                if r["shape"] == shape.name
                and r["variant"] == pair.steered
                and "best_score" in (r.get("placement") or {})
            ]
            key = keys.get(shape.name) or next((r["placement"]["key"] for r in steered), None)
            best = "·"
            if steered:
                q = steered[-1]["placement"]
                best = f"{q['best_score']}: {q['best_nodes']} / {q['eligible_nodes']}"
            label = "·" if key is None else key.rsplit("/", 1)[-1]
            cells = [shape.name, pair.name, label, best]
            for share, ceiling in PLACEMENT_SHARES:
                cell = pair_cells(runs, [shape], placement(share, 100), pair=pair)[0]
                most = median_of(steered, placement(ceiling, 100))
                cells.append(cell if most is None else f"{cell} (≤ {most:.0f})")
            cells += [
                pair_cells(runs, [shape], placement(name), "{:.1f}", pair)[0]
                for name in ("mean_bound_score", "mean_eligible_score")
            ]
            cells.append(pair_cells(runs, [shape], placement("off_eligible"), pair=pair)[0])
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def metric(part: str, key: str | None = None) -> Callable[[Mapping[str, Any]], Any]:
    """A getter of one value of a run's scheduler metrics: `part`, or `part[key]` (or None)."""
    if key is None:
        return lambda r: r["scheduler"][part]
    return lambda r: r["scheduler"][part].get(key)


def median_of(runs: Sequence[Mapping[str, Any]], get: Callable[[Any], Any]) -> float | None:
    values = [get(r) for r in runs if "scheduler" in r]
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def pair_cells(
    runs: Sequence[Mapping[str, Any]],
    shapes: Sequence[Shape],
    get: Callable[[Any], Any],
    fmt: str = "{:.0f}",
    pair: Pair = BARE,
) -> list[str]:
    """Per shape, "twin → steered" of the pair: the median of `get(run)` over rounds."""
    cells = []
    for shape in shapes:
        values = []
        for variant in pair.variants:
            chosen = [r for r in runs if r["shape"] == shape.name and r["variant"] == variant]
            value = median_of(chosen, get)
            values.append("·" if value is None else fmt.format(value))
        cells.append(" → ".join(values))
    return cells


def caption(pair: Pair, text: str) -> str:
    """A detail table's title; the realistic pair's says so."""
    return (
        f"Realistic pods (realistic-twin → realistic-steered): {text}"
        if pair == REALISTIC
        else text
    )


CPU_PROCESSES = ("kube-scheduler", "kube-apiserver", "etcd")


def cpu_table(size: Mapping[str, Any], shapes: Sequence[Shape], pair: Pair = BARE) -> str | None:
    """Per shape, the CPU each process spent per bound pod (median over rounds) and, per
    round, twin scheduler CPU / steered scheduler CPU: the throughput ratio a scheduler with
    cores of its own would see, less moved by other work than pods/s."""
    runs = [r for r in size["runs"] if r.get("cpu_ms_per_pod")]
    if not runs:
        return None
    lines = [
        caption(
            pair,
            f"CPU per bound pod at {size['nodes']} nodes, ms, twin → steered (median over "
            "rounds), from the scheduler's readiness to the last bind; CPU ratio = twin / "
            "steered scheduler CPU of the same round (min / median / max).",
        ),
        "",
        "| shape | " + " | ".join(CPU_PROCESSES) + " | CPU ratio |",
        "|---|---:|---:|---:|---:|",
    ]

    def cpu(name: str) -> Callable[[Mapping[str, Any]], Any]:
        return lambda r: r["cpu_ms_per_pod"].get(name)

    for shape in shapes:
        cells = [pair_cells(runs, [shape], cpu(name), "{:.2f}", pair)[0] for name in CPU_PROCESSES]
        ratios = [
            twin / steered
            for twin, steered in round_pairs(runs, shape.name, cpu("kube-scheduler"), pair)
            if steered
        ]
        lines.append(f"| {shape.name} | " + " | ".join(cells) + f" | {trio(ratios)} |")
    return "\n".join(lines)


def point_table(size: Mapping[str, Any], shapes: Sequence[Shape], pair: Pair = BARE) -> str:
    runs = [r for r in size["runs"] if "scheduler" in r and r["variant"] in pair.variants]
    algorithm = pair_cells(runs, shapes, metric("algorithm_us"), pair=pair)
    lines = [
        caption(
            pair,
            f"Where the time goes at {size['nodes']} nodes: µs per pod, twin → steered (median "
            "over rounds). The algorithm is filter + score; extension points are wall time, "
            "every cycle; Bind waits on the apiserver, asynchronously.",
        ),
        "",
        "| µs per pod | " + " | ".join(s.name for s in shapes) + " |",
        "|---|" + "---:|" * len(shapes),
        "| **algorithm** | " + " | ".join(algorithm) + " |",
    ]
    for point in POINTS:
        if not any(point in r["scheduler"]["extension_point_us"] for r in runs):
            continue
        cells = pair_cells(runs, shapes, metric("extension_point_us", point), pair=pair)
        label = point if point in CPU_POINTS else f"{point} (async)"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


MIN_PLUGIN_CALLS = 20  # fewer kept calls: the mean is one descheduled goroutine or two


def plugin_mean(key: str) -> Callable[[Mapping[str, Any]], Any]:
    """A getter of a plugin's mean µs per call in a run's metrics, None on too few calls."""

    def get(r: Mapping[str, Any]) -> Any:
        m = r["scheduler"]
        if m["plugin_calls_kept"].get(key, 0) < MIN_PLUGIN_CALLS:
            return None
        return m["plugin_us_per_call"].get(key)

    return get


def plugin_table(
    size: Mapping[str, Any], shapes: Sequence[Shape], top: int, pair: Pair = BARE
) -> str:
    """The `top` plugins by time kept over the pair's runs (scheduling points only), mean µs
    per call: per node for Filter and Score, per pod elsewhere."""
    runs = [r for r in size["runs"] if "scheduler" in r and r["variant"] in pair.variants]
    kept: Counter[str] = Counter()
    for r in runs:
        means = r["scheduler"]["plugin_us_per_call"]
        for key, calls in r["scheduler"]["plugin_calls_kept"].items():
            if key.split("/")[0] in CPU_POINTS:
                kept[key] += means[key] * calls
    lines = [
        caption(
            pair,
            f"Plugins at {size['nodes']} nodes: mean µs per call (Filter, Score: per node "
            "evaluated), twin → steered; sampled cycles only, top by time recorded; · where "
            f"fewer than {MIN_PLUGIN_CALLS} calls were kept.",
        ),
        "",
        "| µs per call | " + " | ".join(s.name for s in shapes) + " |",
        "|---|" + "---:|" * len(shapes),
    ]
    for key, _ in kept.most_common(top):
        cells = pair_cells(runs, shapes, plugin_mean(key), "{:.1f}", pair)
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pending_report(size: Mapping[str, Any]) -> list[str]:
    lines = []
    for r in size["runs"]:
        for message, count in (r.get("pending_reasons") or {}).items():
            lines.append(
                f"- {size['nodes']} nodes, {r['shape']} {r['variant']} round {r['round']}: "
                f"{count} x {message[:300]}"
            )
    return lines


def scheduler_note(doc: Mapping[str, Any]) -> str:
    """Which profiles file the scheduler ran with and each profile's percentageOfNodesToScore."""
    profiles = doc.get("profiles", "manifests/scheduler/profiles.yaml")
    steer = doc.get("steer_percentage")
    if steer is None:
        text = f"with {profiles} as it is"
    else:
        text = f"with {profiles}, percentageOfNodesToScore {steer} on every steer-* profile"
    percentages = doc.get("percentage_of_nodes_to_score")
    if percentages:
        default = percentages.get("") or "adaptive"
        text += (
            " ("
            + ", ".join(
                f"{name}: {default if pct is None else pct}"
                for name, pct in percentages.items()
                if name
            )
            + ")"
        )
    return text


def print_report(doc: Mapping[str, Any], goal: float, top_plugins: int) -> None:
    """The markdown scoreboard of a results document (a run just made, or --report FILE)."""
    known = {s.name: s for s in (*SHAPES, *OPTIONS)}
    shapes = [known.get(n) or Shape(n, "?", {}) for n in doc["shapes"]]
    args = doc["args"]
    variants = doc.get("variants") or [BARE.name]
    twins = (
        "Twin = the base pod unmutated but with the mutated pod's schedulerName (profile "
        "differences not counted; a shape with a Service, a-chain, gets the default topology "
        "spreading in its twin)"
    )
    if REALISTIC.name in variants:
        twins += (
            "; realistic-twin = the shape's pod as a Deployment makes it, unmutated, for "
            "default-scheduler (selected by a Service and owned by a ReplicaSet: a realistic "
            "pod without constraints of its own gets the default topology spreading); "
            "realistic-steered = it mutated"
        )
    print(
        f"Source {doc['source']}; kube-scheduler v1.36.2 {scheduler_note(doc)}, client "
        f"qps/burst {doc['scheduler_qps']}; {args['pods']} pods per run, {args['rounds']} "
        f"round(s), variants {', '.join(variants)}. {twins}. Scorer readings: "
        f"{doc['scorer_readings']}."
    )
    print()
    for size in doc["sizes"]:
        pairs = pairs_run(size)
        found = size.get("nodes_to_find")
        scored = (
            "; feasible nodes looked for: " + ", ".join(f"{name} {n}" for name, n in found.items())
            if found
            else ""
        )
        print(
            f"{size['nodes']} nodes ({size['gpu_nodes']} with {size['gpus_per_gpu_node']} GPUs), "
            f"setup: nodes {size['create_nodes_s']} s, scorer {size['score_nodes_s']} s; "
            f"scorer wrote: {size['node_summary']}{scored}; size runtime "
            f"{size['runtime_s'] / 60:.1f} min."
        )
        print()
        for pair in pairs:
            print(throughput_table(size, shapes, goal, pair))
            print()
        print(placement_table(size, shapes))
        print()
        options = [s for s in shapes if s.option_of]
        if options:
            print("Options (not what the webhook does; the twin is the shape's own):")
            print("\n".join(f"- `{o.name}`: {o.about}" for o in options))
            print()
        for pair in pairs:
            cpu = cpu_table(size, shapes, pair)
            if cpu:
                print(cpu)
                print()
        for pair in pairs:
            print(point_table(size, shapes, pair))
            print()
        for pair in pairs:
            print(plugin_table(size, shapes, top_plugins, pair))
            print()
        pending = pending_report(size)
        if pending:
            print("Pods left Pending (scheduler message):")
            print("\n".join(pending))
            print()
    print(f"Total runtime {doc['runtime_s'] / 60:.1f} min.")
