"""`kubectl steer` (launcher/kubectl.py) without a cluster: kubectl's flags anywhere on the line,
the pod's namespace as kubectl picks it, the Service proxy path and credentials the plugin
sends, what it says when the apiserver or the scorer refuses, and the krew manifest's shape.
Through the real kubectl, apiserver and scorer: tests/e2e/test_kubectl_plugin.py."""

from __future__ import annotations

import argparse
import json
import re
import tomllib
from collections.abc import Iterator
from email.message import Message
from pathlib import Path

import pytest
import yaml

from launcher import commands
from launcher.commands import kubectl_main as main
from launcher.kubectl import KubectlFront, pod_target
from tests.conftest import EXAMPLE_POLICY, ROOT
from tests.json_server import json_server
from tests.test_cli import _actions_without_help

KREW_MANIFEST = ROOT / "plugins" / "krew" / "steer.yaml"


def build_parser() -> argparse.ArgumentParser:
    return commands.build_parser(KubectlFront())


def parse_args(argv: list[str]) -> argparse.Namespace:
    return commands.parse_args(KubectlFront(), argv)


def kubeconfig(path: Path, server: str = "https://127.0.0.1:1", token: str = "t0ken") -> Path:
    """Two contexts on one cluster: `main` (current, namespace apps) and `other` (none)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [
            {"name": "main", "context": {"cluster": "c", "user": "u", "namespace": "apps"}},
            {"name": "other", "context": {"cluster": "c", "user": "u"}},
        ],
        "current-context": "main",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_kubectl_flags_work_before_and_after_the_command_words() -> None:
    before = parse_args(["--context", "prod", "-n", "team-a", "explain", "pod", "web-0"])
    after = parse_args(["explain", "pod", "web-0", "--context=prod", "--namespace", "team-a"])
    for args in (before, after):
        assert (args.context, args.namespace, args.pod) == ("prod", "team-a", "web-0")
    # A flag given before the words is not reset by the subcommand's copy of it.
    mixed = parse_args(["--kubeconfig", "/k", "explain", "node", "n1", "-o", "json"])
    assert (mixed.kubeconfig, mixed.output, mixed.name) == ("/k", "json", "n1")


def test_defaults_name_the_installed_scorer_service() -> None:
    args = parse_args(["explain", "nodes"])
    assert (args.scorer_namespace, args.scorer_service, args.scorer_port) == (
        "kube-steer",
        "steer-scorer",
        "http",
    )
    assert (args.kubeconfig, args.context, args.namespace, args.scorer) == (None,) * 4
    assert (args.output, args.request_timeout) == ("table", 10.0)


def test_every_command_and_flag_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(_actions_without_help(build_parser(), "kubectl steer")) == []
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: kubectl steer ")
    for text in ("explain", "policy", "--kubeconfig", "--context", "--namespace", "services/proxy"):
        assert text in out


def test_the_pods_namespace_is_the_flag_the_reference_or_the_contexts(tmp_path: Path) -> None:
    kc = str(kubeconfig(tmp_path / "kc"))
    assert pod_target(parse_args(["explain", "pod", "team-a/web-0"])) == ("team-a", "web-0")
    assert pod_target(parse_args(["explain", "pod", "web-0", "-n", "x"])) == ("x", "web-0")
    ctx = ["--kubeconfig", kc]
    assert pod_target(parse_args(["explain", "pod", "web-0", *ctx])) == ("apps", "web-0")
    other = parse_args(["explain", "pod", "web-0", *ctx, "--context", "other"])
    assert pod_target(other) == ("default", "web-0")


def test_a_pod_reference_that_contradicts_the_namespace_is_refused() -> None:
    with pytest.raises(SystemExit, match="in namespace 'team-a', but -n says 'team-b'"):
        pod_target(parse_args(["explain", "pod", "team-a/web-0", "-n", "team-b"]))
    with pytest.raises(SystemExit, match="expected NAMESPACE/NAME, got 'a/b/c'"):
        pod_target(parse_args(["explain", "pod", "a/b/c"]))
    with pytest.raises(SystemExit, match="give \\[NAMESPACE/\\]NAME, or -f FILE"):
        main(["explain", "pod", "--scorer", "http://127.0.0.1:1"])


@pytest.fixture
def apiserver() -> Iterator[tuple[str, list[tuple[str, Message]], dict[str, tuple[int, bytes]]]]:
    """An HTTP server playing the apiserver's proxy: records each request, answers from
    `answers` by path (200 with a node's detail by default)."""
    seen: list[tuple[str, Message]] = []
    answers: dict[str, tuple[int, bytes]] = {}
    node = json.dumps({"node": "n1", "labels": {"k": "v"}}).encode()

    def answer(path: str, headers: Message) -> tuple[int, bytes]:
        seen.append((path, headers))
        return answers.get(path, (200, node))

    with json_server(answer) as url:
        yield url, seen, answers


PROXY = "/api/v1/namespaces/kube-steer/services/http:steer-scorer:http/proxy"


def test_the_scorer_is_asked_through_the_service_proxy_with_the_kubeconfigs_token(
    apiserver: tuple[str, list[tuple[str, Message]], dict[str, tuple[int, bytes]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, seen, _answers = apiserver
    kc = str(kubeconfig(tmp_path / "kc", server=url, token="s3cret"))
    assert main(["explain", "node", "n1", "--kubeconfig", kc, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"node": "n1", "labels": {"k": "v"}}
    (path, headers), *_ = seen
    assert path == f"{PROXY}/explain/node/n1"
    assert headers["Authorization"] == "Bearer s3cret"
    where = ["--scorer-namespace", "ops", "--scorer-service", "sc", "--scorer-port", "9000"]
    main(["explain", "pod", "web-0", "--kubeconfig", kc, *where, "-o", "json"])
    assert (
        seen[-1][0] == "/api/v1/namespaces/ops/services/http:sc:9000/proxy/explain/pod/apps/web-0"
    )
    main(["audit", "report", "--limit", "7", "--kubeconfig", kc, "-o", "json"])
    assert seen[-1][0] == f"{PROXY}/explain/audit?limit=7"


@pytest.mark.parametrize(
    ("namespace_flag", "manifest_namespace", "sent"),
    [([], None, "?namespace=apps"), ([], "team-x", ""), (["-n", "z"], "team-x", "?namespace=z")],
)
def test_a_posted_pods_namespace_is_the_flag_the_manifests_or_the_contexts(
    apiserver: tuple[str, list[tuple[str, Message]], dict[str, tuple[int, bytes]]],
    tmp_path: Path,
    namespace_flag: list[str],
    manifest_namespace: str | None,
    sent: str,
) -> None:
    url, seen, answers = apiserver
    answers[f"{PROXY}/explain/pod{sent}"] = (200, b'{"allowed": []}')
    kc = str(kubeconfig(tmp_path / "kc", server=url))
    metadata = {"name": "p", **({"namespace": manifest_namespace} if manifest_namespace else {})}
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump({"kind": "Pod", "metadata": metadata, "spec": {}}))
    main(["explain", "pod", "-f", str(manifest), "--kubeconfig", kc, "-o", "json", *namespace_flag])
    assert seen[-1][0] == f"{PROXY}/explain/pod{sent}"
    assert seen[-1][1]["Content-Type"] == "application/yaml"


@pytest.mark.parametrize(
    ("status", "body", "says"),
    [
        (
            503,
            {"kind": "Status", "message": 'no endpoints available for service "steer-scorer"'},
            "no endpoints available for service",
        ),
        (503, {"kind": "Status", "message": "x"}, "is a scorer replica running?"),
        (403, {"kind": "Status", "message": "forbidden"}, "`get` (and `create` for a posted"),
        (404, {"kind": "Status", "message": 'services "steer-scorer" not found'}, "installed"),
        (404, {"error": "no node n1 in the last cycle"}, "HTTP 404: no node n1 in the last"),
    ],
)
def test_refusals_say_what_failed_and_what_to_check(
    apiserver: tuple[str, list[tuple[str, Message]], dict[str, tuple[int, bytes]]],
    tmp_path: Path,
    status: int,
    body: dict[str, str],
    says: str,
) -> None:
    url, _seen, answers = apiserver
    answers[f"{PROXY}/explain/node/n1"] = (status, json.dumps(body).encode())
    kc = str(kubeconfig(tmp_path / "kc", server=url))
    with pytest.raises(SystemExit) as done:
        main(["explain", "node", "n1", "--kubeconfig", kc])
    message = str(done.value.code)
    assert says in message
    assert message.startswith("the scorer Service kube-steer/steer-scorer (port http): ")


def test_no_kubeconfig_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SystemExit) as done:
        main(["explain", "nodes", "--kubeconfig", str(tmp_path / "absent")])
    assert "kubectl steer: no Kubernetes credentials in " in str(done.value.code)
    assert str(tmp_path / "absent") in str(done.value.code)


def test_policy_validate_needs_no_cluster(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["policy", "validate", str(EXAMPLE_POLICY)]) == 0
    assert "valid policy" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE_POLICY.read_text().replace("step: 10", "step: 0", 1))
    assert main(["policy", "validate", str(bad), "-o", "json"]) == 1
    errors = json.loads(capsys.readouterr().out)["errors"]
    assert errors and all(e["path"].startswith("spec.") for e in errors)


def test_the_krew_manifest_installs_kubectl_steer_of_this_release_on_each_platform() -> None:
    manifest = yaml.safe_load(KREW_MANIFEST.read_text())
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin"
    assert manifest["metadata"]["name"] == "steer"
    spec = manifest["spec"]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert spec["version"] == f"v{version}"
    assert spec["shortDescription"] and len(spec["shortDescription"]) <= 60
    assert spec["homepage"].startswith("https://")
    platforms = {
        (p["selector"]["matchLabels"]["os"], p["selector"]["matchLabels"]["arch"]): p
        for p in spec["platforms"]
    }
    assert set(platforms) == {(o, a) for o in ("linux", "darwin") for a in ("amd64", "arm64")}
    for (os_name, arch), platform in platforms.items():
        assert platform["bin"] == "kubectl-steer"
        assert platform["uri"].startswith("https://")
        assert platform["uri"].endswith(f"kubectl-steer_v{version}_{os_name}_{arch}.tar.gz")
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert {"from": "kubectl-steer", "to": "."} in platform["files"]
    # The executable krew links is the console script the package installs.
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-steer"] == "launcher.commands:kubectl_main"
