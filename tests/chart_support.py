"""Rendering the Helm chart (charts/kube-steer) and the kustomize install (manifests/) side by
side, for tests/test_chart.py and tests/e2e/test_chart.py.

helm and kubectl (its kustomize) are the ones `make tools` unpacks into the virtualenv's bin
folder (tools/kube_tools.py), or $HELM and $KUBECTL. They are part of the test setup, never
optional: a missing one fails with the command that installs it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "kube-steer"
MANIFESTS = ROOT / "manifests"
COMPONENTS = MANIFESTS / "components"
OCM = MANIFESTS / "ocm"
RELEASE = "kube-steer"
# Labels Helm's convention adds to every object of the chart (templates/_helpers.tpl,
# kube-steer.helmLabels); the only difference the chart may have from the kustomize base.
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance")

ObjectId = tuple[str, str, str, str]  # apiVersion, kind, namespace, name


def tool(name: str) -> Path:
    """$HELM / $KUBECTL, else the one beside this interpreter (the virtualenv's bin)."""
    given = os.environ.get(name.upper())
    path = Path(given) if given else Path(sys.executable).parent / name
    assert path.is_file() and os.access(path, os.X_OK), (
        f"{path}: no {name}; `make tools` puts helm and kubectl into .venv/bin "
        f"(or set ${name.upper()})"
    )
    return path


def run(
    name: str, *args: str, check: bool = True, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(tool(name)), *args], capture_output=True, text=True, timeout=120, **kwargs
    )
    if check:
        assert done.returncode == 0, f"{name} {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def set_flags(values: Mapping[str, str]) -> list[str]:
    return [flag for key, value in values.items() for flag in ("--set", f"{key}={value}")]


def helm_template(*args: str, values: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """`helm template` of the chart (its crds/ included), with `values` as --set KEY=VALUE."""
    done = run(
        "helm", "template", RELEASE, str(CHART), "--include-crds", *set_flags(values or {}), *args
    )
    return parse(done.stdout)


def kustomize(
    workdir: Path, components: Sequence[str] = (), manifests: Path = MANIFESTS
) -> list[dict[str, Any]]:
    """`kubectl kustomize` of an overlay of `manifests` listing `components` (names under
    manifests/components/, or folders)."""
    overlay = workdir / ("overlay-" + ("-".join(Path(c).name for c in components) or "base"))
    overlay.mkdir(parents=True, exist_ok=True)
    base = os.path.relpath(manifests, overlay)
    listed = [
        os.path.relpath(c, overlay) if "/" in c else f"{base}/components/{c}" for c in components
    ]
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [base],
        "components": listed,
    }
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return parse(run("kubectl", "kustomize", str(overlay)).stdout)


def ocm_objects(cluster_name: str, hub_user: str) -> list[dict[str, Any]]:
    """Every object of manifests/ocm/, its ${CLUSTER_NAME} and ${HUB_USER} filled in as the
    comment of hub-rbac.yaml does with envsubst."""
    variables = {"CLUSTER_NAME": cluster_name, "HUB_USER": hub_user}
    return [
        doc
        for path in sorted(OCM.glob("*.yaml"))
        for doc in parse(re.sub(r"\$\{(\w+)\}", lambda m: variables[m[1]], path.read_text()))
    ]


def parse(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def object_id(doc: Mapping[str, Any]) -> ObjectId:
    meta = doc["metadata"]
    return (doc["apiVersion"], doc["kind"], meta.get("namespace", ""), meta["name"])


def without_helm_labels(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The object with Helm's own labels removed (and `labels` with them, if that empties it)."""
    meta = dict(doc["metadata"])
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in HELM_LABELS}
    if labels:
        meta["labels"] = labels
    else:
        meta.pop("labels", None)
    return {**doc, "metadata": meta}


def by_id(docs: Iterable[Mapping[str, Any]]) -> dict[ObjectId, dict[str, Any]]:
    objects: dict[ObjectId, dict[str, Any]] = {}
    for doc in docs:
        key = object_id(doc)
        assert key not in objects, f"{key} rendered twice"
        objects[key] = without_helm_labels(doc)
    return objects


def differences(chart: Any, kustomized: Any, path: str = "") -> list[str]:
    """Each field where the two differ, by its path (`spec.template.spec.containers[0].image:
    chart 'a' != kustomize 'b'`)."""
    if isinstance(chart, dict) and isinstance(kustomized, dict):
        found = []
        for key in sorted(set(chart) | set(kustomized), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in kustomized:
                found.append(f"{where}: only in the chart ({chart[key]!r})")
            elif key not in chart:
                found.append(f"{where}: missing from the chart (kustomize: {kustomized[key]!r})")
            else:
                found += differences(chart[key], kustomized[key], where)
        return found
    if isinstance(chart, list) and isinstance(kustomized, list):
        if len(chart) != len(kustomized):
            return [f"{path}: chart has {len(chart)} items, kustomize {len(kustomized)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(chart, kustomized, strict=True))
            for d in differences(a, b, f"{path}[{i}]")
        ]
    if chart != kustomized or type(chart) is not type(kustomized):
        return [f"{path}: chart {chart!r} != kustomize {kustomized!r}"]
    return []


def mismatches(
    chart: Iterable[Mapping[str, Any]], kustomized: Iterable[Mapping[str, Any]]
) -> list[str]:
    """Every object the two renderings do not share, and every field of a shared object that
    differs; empty when they render the same objects."""
    ours, theirs = by_id(chart), by_id(kustomized)
    found = [f"{key}: only in the chart" for key in sorted(set(ours) - set(theirs))]
    found += [f"{key}: missing from the chart" for key in sorted(set(theirs) - set(ours))]
    for key in sorted(set(ours) & set(theirs)):
        found += [f"{key} {d}" for d in differences(ours[key], theirs[key])]
    return found


# Components that pick the admission mode (docs/install.md, "Which admission mode"): one chart
# value, admission.mode, instead of a toggle each; they exclude each other.
ADMISSION_MODES = {"admission-policy": "policy", "admission-policy-and-webhook": "both"}


def toggled_components() -> list[str]:
    """The components under manifests/components/ that each have a `<name>.enabled` value."""
    return sorted(
        p.name
        for p in COMPONENTS.iterdir()
        if (p / "kustomization.yaml").exists() and p.name not in ADMISSION_MODES
    )


def every_component_values() -> dict[str, str]:
    """Chart values with every toggle on and the admission mode that keeps them all (both)."""
    values = {toggle(name): "true" for name in toggled_components()}
    return {**values, "admission.mode": "both"}


def toggle(component: str) -> str:
    """The chart value that turns a kustomize component on: `cert-manager` ->
    `certManager.enabled`."""
    first, *rest = component.split("-")
    return first + "".join(word.capitalize() for word in rest) + ".enabled"
