"""The scheduler bench's markdown scoreboard, from its results document."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .nodes import GPU
from .scheduler_metrics import CPU_POINTS, POINTS
from .shapes import OPTIONS, SHAPES, VARIANTS, Shape


def trio(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def round_pairs(
    runs: Sequence[Mapping[str, Any]], shape: str, get: Callable[[Mapping[str, Any]], Any]
) -> list[tuple[float, float]]:
    """Per round, (twin, steered) of `get(run)` for the shape, where both runs have it."""
    by_round: dict[int, dict[str, Any]] = {}
    for r in runs:
        if r["shape"] == shape and "error" not in r:
            by_round.setdefault(r["round"], {})[r["variant"]] = get(r)
    return [
        (pair["twin"], pair["steered"])
        for pair in by_round.values()
        if pair.get("twin") is not None and pair.get("steered") is not None
    ]


def shape_summary(size: Mapping[str, Any], shape: str) -> dict[str, Any]:
    runs = [r for r in size["runs"] if r["shape"] == shape and "error" not in r]
    ratios = [
        steered / twin
        for twin, steered in round_pairs(runs, shape, lambda r: r["pods_per_s"])
        if twin > 0
    ]
    return {
        "steered_pods_per_s": [r["pods_per_s"] for r in runs if r["variant"] == "steered"],
        "twin_pods_per_s": [r["pods_per_s"] for r in runs if r["variant"] == "twin"],
        "ratios": [round(x, 3) for x in ratios],
        "ratio_min": round(min(ratios), 3) if ratios else None,
        "ratio_median": round(statistics.median(ratios), 3) if ratios else None,
        "unbound": sum(r["pods"] - r["bound"] for r in runs),
    }


def throughput_table(size: Mapping[str, Any], shapes: Sequence[Shape], goal: float) -> str:
    lines = [
        f"Scheduling throughput at {size['nodes']} nodes, pods/s (min / median / max over "
        "rounds); ratio = steered / twin of the same round.",
        "",
        "| shape | scheduler | injected | twin pods/s | steered pods/s | ratio | "
        f"≥ {goal}x | algorithm µs/pod | unbound |",
        "|---|---|---|---:|---:|---:|:-:|---:|---:|",
    ]
    runs = [r for r in size["runs"] if "scheduler" in r]
    for shape in shapes:
        s = shape_summary(size, shape.name)
        pod = size["pods"][shape.name]
        resources = pod["steered"]["spec"]["containers"][0]["resources"]["requests"]
        extended = sum(1 for k in resources if "/" in k and k != GPU)
        affinity = pod["steered"]["spec"].get("affinity") or {}
        preferred = len(
            (affinity.get("nodeAffinity") or {}).get(
                "preferredDuringSchedulingIgnoredDuringExecution"
            )
            or ()
        )
        required = (affinity.get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        terms = len(required["nodeSelectorTerms"]) if required else 0
        anti = len(
            (affinity.get("podAntiAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or ()
        )
        spread = len(pod["steered"]["spec"].get("topologySpreadConstraints") or ())
        tolerations = len(pod["steered"]["spec"].get("tolerations") or ())
        injected = f"{preferred} pref, {terms} req terms, {extended} resources"
        if anti:
            injected += f", {anti} anti-aff"
        if spread:
            injected += f", {spread} spread"
        if tolerations:
            injected += f", {tolerations} tol"
        median = s["ratio_median"]
        verdict = "-" if median is None else ("yes" if median >= goal else "**no**")
        lines.append(
            f"| {shape.name} | {pod['steered']['spec'].get('schedulerName', 'default')} | "
            f"{injected} | {trio(s['twin_pods_per_s'], '{:.0f}')} | "
            f"{trio(s['steered_pods_per_s'], '{:.0f}')} | {trio(s['ratios'])} | {verdict} | "
            f"{pair_cells(runs, [shape], metric('algorithm_us'))[0]} | {s['unbound']} |"
        )
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
) -> list[str]:
    """Per shape, "twin → steered" of the median of `get(run)` over rounds."""
    cells = []
    for shape in shapes:
        pair = []
        for variant in VARIANTS:
            chosen = [r for r in runs if r["shape"] == shape.name and r["variant"] == variant]
            value = median_of(chosen, get)
            pair.append("·" if value is None else fmt.format(value))
        cells.append(" → ".join(pair))
    return cells


CPU_PROCESSES = ("kube-scheduler", "kube-apiserver", "etcd")


def cpu_table(size: Mapping[str, Any], shapes: Sequence[Shape]) -> str | None:
    """Per shape, the CPU each process spent per bound pod (median over rounds) and, per
    round, twin scheduler CPU / steered scheduler CPU: the throughput ratio a scheduler with
    cores of its own would see, less moved by other work than pods/s."""
    runs = [r for r in size["runs"] if r.get("cpu_ms_per_pod")]
    if not runs:
        return None
    lines = [
        f"CPU per bound pod at {size['nodes']} nodes, ms, twin → steered (median over rounds), "
        "from the scheduler's readiness to the last bind; CPU ratio = twin / steered "
        "scheduler CPU of the same round (min / median / max).",
        "",
        "| shape | " + " | ".join(CPU_PROCESSES) + " | CPU ratio |",
        "|---|---:|---:|---:|---:|",
    ]

    def cpu(name: str) -> Callable[[Mapping[str, Any]], Any]:
        return lambda r: r["cpu_ms_per_pod"].get(name)

    for shape in shapes:
        cells = [pair_cells(runs, [shape], cpu(name), "{:.2f}")[0] for name in CPU_PROCESSES]
        ratios = [
            twin / steered
            for twin, steered in round_pairs(runs, shape.name, cpu("kube-scheduler"))
            if steered
        ]
        lines.append(f"| {shape.name} | " + " | ".join(cells) + f" | {trio(ratios)} |")
    return "\n".join(lines)


def point_table(size: Mapping[str, Any], shapes: Sequence[Shape]) -> str:
    runs = [r for r in size["runs"] if "scheduler" in r]
    lines = [
        f"Where the time goes at {size['nodes']} nodes: µs per pod, twin → steered (median over "
        "rounds). The algorithm is filter + score; extension points are wall time, every "
        "cycle; Bind waits on the apiserver, asynchronously.",
        "",
        "| µs per pod | " + " | ".join(s.name for s in shapes) + " |",
        "|---|" + "---:|" * len(shapes),
        "| **algorithm** | " + " | ".join(pair_cells(runs, shapes, metric("algorithm_us"))) + " |",
    ]
    for point in POINTS:
        if not any(point in r["scheduler"]["extension_point_us"] for r in runs):
            continue
        cells = pair_cells(runs, shapes, metric("extension_point_us", point))
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


def plugin_table(size: Mapping[str, Any], shapes: Sequence[Shape], top: int) -> str:
    """The `top` plugins by time kept over all runs (scheduling points only), mean µs per
    call: per node for Filter and Score, per pod elsewhere."""
    runs = [r for r in size["runs"] if "scheduler" in r]
    kept: Counter[str] = Counter()
    for r in runs:
        means = r["scheduler"]["plugin_us_per_call"]
        for key, calls in r["scheduler"]["plugin_calls_kept"].items():
            if key.split("/")[0] in CPU_POINTS:
                kept[key] += means[key] * calls
    lines = [
        f"Plugins at {size['nodes']} nodes: mean µs per call (Filter, Score: per node "
        "evaluated), twin → steered; sampled cycles only, top by time recorded; · where fewer "
        f"than {MIN_PLUGIN_CALLS} calls were kept.",
        "",
        "| µs per call | " + " | ".join(s.name for s in shapes) + " |",
        "|---|" + "---:|" * len(shapes),
    ]
    for key, _ in kept.most_common(top):
        cells = pair_cells(runs, shapes, plugin_mean(key), "{:.1f}")
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


def print_report(doc: Mapping[str, Any], goal: float, top_plugins: int) -> None:
    """The markdown scoreboard of a results document (a run just made, or --report FILE)."""
    known = {s.name: s for s in (*SHAPES, *OPTIONS)}
    shapes = [known.get(n) or Shape(n, "?", {}) for n in doc["shapes"]]
    args = doc["args"]
    print(
        f"Source {doc['source']}; kube-scheduler v1.36.2 with manifests/scheduler/"
        f"profiles.yaml, client qps/burst {doc['scheduler_qps']}; {args['pods']} pods per run, "
        f"{args['rounds']} round(s); twin = the base pod unmutated but with the mutated pod's "
        f"schedulerName (profile differences not counted; a shape with a Service, a-chain, gets "
        f"the default topology spreading in its twin). Scorer readings: "
        f"{doc['scorer_readings']}."
    )
    print()
    for size in doc["sizes"]:
        print(
            f"{size['nodes']} nodes ({size['gpu_nodes']} with {size['gpus_per_gpu_node']} GPUs), "
            f"setup: nodes {size['create_nodes_s']} s, scorer {size['score_nodes_s']} s; "
            f"scorer wrote: {size['node_summary']}; size runtime {size['runtime_s'] / 60:.1f} min."
        )
        print()
        print(throughput_table(size, shapes, goal))
        print()
        options = [s for s in shapes if s.option_of]
        if options:
            print("Options (not what the webhook does; the twin is the shape's own):")
            print("\n".join(f"- `{o.name}`: {o.about}" for o in options))
            print()
        cpu = cpu_table(size, shapes)
        if cpu:
            print(cpu)
            print()
        print(point_table(size, shapes))
        print()
        print(plugin_table(size, shapes, top_plugins))
        print()
        pending = pending_report(size)
        if pending:
            print("Pods left Pending (scheduler message):")
            print("\n".join(pending))
            print()
    print(f"Total runtime {doc['runtime_s'] / 60:.1f} min.")
