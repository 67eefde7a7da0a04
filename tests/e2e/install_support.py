"""What installing kube-steer on a real control plane takes, shared by the kustomize install
(tests/e2e/test_install.py) and the Helm chart (tests/e2e/test_chart.py).

Each module has a control plane of its own (`loopback_plane`), because installing means
cluster-wide objects named as in production (webhook configurations, ClusterRoles, the
kube-steer namespace) that the session's shared control plane must not see. Its Service
ClusterIP range is a /16 inside 127.0.0.0/8: every ClusterIP is then a loopback address of this
machine, and a local process listening on a Service's ClusterIP and port is reached by the
apiserver exactly as a pod behind that Service would be. So the installed admission
configurations are used unmodified (clientConfig.service, caBundle from the scorer's leader,
TLS verified against the Service's DNS name), and "images replaced by local processes" means:
`steer webhook serve` and `steer scorer run` from this checkout, on their Services' ClusterIPs,
with their ServiceAccounts' tokens and the policy from the installed ConfigMap.

No kubelet runs there: pods are bound but never run. A ResourceQuota of zero pods in kube-steer
(`no_pods_here`) stands in for "the image does not run", so Deployments there never make pods
that nothing could stop; the steps of the install docs that wait for or talk to running pods
are replaced by `start_webhook`, `start_scorer`, `explain_through_plugin` and `scorer_stopped`.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import random
import re
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from kubernetes import client

from kits.control_plane import ControlPlane
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.service_processes import (
    RunningController,
    RunningScorer,
    RunningWebhook,
    ServingCertificate,
    running_controller,
    running_scorer,
    running_webhook,
)
from kits.synthetic_exporter import SyntheticCluster
from kits.waiting import wait_until
from launcher.commands import build_parser

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
NS = "kube-steer"
NODES = ("install-e2e-1", "install-e2e-2", "install-e2e-3")
PAUSE = "registry.k8s.io/pause:3.10"


@contextlib.contextmanager
def loopback_plane(folder: Path) -> Iterator[ControlPlane]:
    """A control plane (with the controller manager) whose ClusterIPs are loopback addresses,
    and whose apiserver keeps an audit log of every request of a kube-steer ServiceAccount
    (tests/e2e/rbac_use.py reads it)."""
    second_octet = random.randint(64, 250)  # two runs side by side rarely share a range
    with ControlPlane.start(
        folder,
        controller_manager=True,
        apiserver_args=[f"--service-cluster-ip-range=127.{second_octet}.0.0/16"],
        audit_groups=[f"system:serviceaccounts:{NS}"],
    ) as started:
        yield started


@contextlib.contextmanager
def scraped_nodes() -> Iterator[PrometheusServer]:
    """A real Prometheus scraping synthetic power data of NODES (CPU 300, 400 and 500 W, as
    the starter policy's Kepler >= 0.10 query reads it)."""
    cluster = SyntheticCluster(nodes=len(NODES), gpus_per_node=0, node_prefix="install-e2e-")
    for i, name in enumerate(NODES):
        cluster.set_power(name, package_watts=300 + 100 * i)
    with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
        yield prom


def steered_and_bound(core: client.CoreV1Api, namespace: str, selector: str) -> list[Any] | None:
    """The pods of a workload once at least two exist and every one is steered by the webhook
    (its trace annotation) and bound by the scheduler; None until then."""
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    ok = len(pods) >= 2 and all(
        p.spec.node_name and "kube-steer.github.io/trace" in (p.metadata.annotations or {})
        for p in pods
    )
    return pods if ok else None


def kubectl(plane: ControlPlane, *args: str, input: str | None = None) -> str:
    return plane.kubectl(*args, input=input)


def no_pods_here(plane: ControlPlane) -> None:
    """Nothing runs pods here, so none may be made in kube-steer (they could never stop)."""
    kubectl(
        plane,
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "e2e-no-kubelet", "namespace": NS},
                "spec": {"hard": {"pods": "0"}},
            }
        ),
    )
    # Pods made before the quota are not bound yet (nodes come later): they go at once.
    plane.delete_pods(NS)


HELM_SECTION = "Install with Helm"


def split_section(markdown: str, title: str) -> tuple[str, str]:
    """The `## title` section of a page (up to the next `## `), and the page without it."""
    match = re.search(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", markdown, flags=re.S | re.M)
    assert match, f"no section '## {title}'"
    return match.group(0), markdown[: match.start()] + markdown[match.end() :]


def doc_commands(markdown: str) -> list[str]:
    """Each shell command of the page's `sh` blocks, in order: continuation lines joined,
    heredocs kept whole, comment lines dropped."""
    commands: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", markdown, flags=re.S | re.M):
        lines = block.splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            command = line
            while command.endswith("\\") and i < len(lines):
                command = command[:-1] + lines[i].strip()
                i += 1
            heredoc = re.search(r"<<'?(\w+)'?", command)
            if heredoc:
                end = heredoc.group(1)
                while i < len(lines):
                    command += "\n" + lines[i]
                    i += 1
                    if lines[i - 1] == end:
                        break
            commands.append(command)
    return commands


@dataclass
class Installation:
    """The state the replaced steps build up while the page runs."""

    plane: ControlPlane
    workdir: Path
    prom: PrometheusServer
    shell_env: dict[str, str]
    stack: contextlib.ExitStack
    webhook: RunningWebhook | None = None
    scorer: RunningScorer | None = None
    controller: RunningController | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    # What a step recorded for a later one to compare against.
    facts: dict[str, Any] = field(default_factory=dict)

    def scratch(self, name: str) -> Path:
        """A folder for what the test makes (outside the checkout the commands run in)."""
        folder = self.workdir.parent / name
        folder.mkdir(exist_ok=True)
        return folder

    def cluster_ip(self, service: str) -> str:
        return kubectl(
            self.plane, "-n", NS, "get", "service", service, "-o=jsonpath={.spec.clusterIP}"
        )

    def account_kubeconfig(self, account: str) -> Path:
        """A kubeconfig holding a token of the ServiceAccount, as the pod would mount it."""
        token = kubectl(self.plane, "-n", NS, "create", "token", account, "--duration=1h").strip()
        ca = base64.b64encode(self.plane.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.plane.url, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": account, "user": {"token": token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": account}}],
            "current-context": "e2e",
        }
        path = self.scratch("accounts") / f"{account}.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def config_map_policy(self) -> str:
        data = kubectl(self.plane, "-n", NS, "get", "configmap", "steer-policy", "-o=json")
        return str(json.loads(data)["data"]["policy.yaml"])

    def installed_policy(self) -> Path:
        """The policy file the services read, with the ConfigMap's content: the mounted file.
        Called again after the ConfigMap changed, it does what the kubelet does a minute
        later: swaps the file whole (never half written) under the running services."""
        path = self.scratch("policy") / "installed-policy.yaml"
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(self.config_map_policy())
        os.replace(partial, path)
        return path


def bindable(port: int, host: str) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def start_webhook(run: Installation) -> None:
    """`rollout status deployment/steer-webhook`: the webhook, from this checkout, on its
    Service's ClusterIP:443 with the certificate the controller's leader put in its Secret (as
    the pods wait for their Secret volume, this waits for the Secret and both caBundles)."""
    ip = run.cluster_ip("steer-webhook")
    # CI runs as root; elsewhere run `make e2e` as root or with CAP_NET_BIND_SERVICE.
    assert bindable(443, ip), (
        "binding port 443 (the Service's port) needs root or CAP_NET_BIND_SERVICE"
    )
    secret = wait_until(
        "the controller's leader made the webhook's certificate and set both caBundles",
        lambda: _issued_and_trusted(run),
        timeout=60,
        interval=0.5,
    )
    folder = run.scratch("mounted-tls")
    folder.chmod(0o700)
    for key in ("tls.crt", "tls.key"):
        (folder / key).write_bytes(base64.b64decode(secret["data"][key]))
    # The CA the apiserver was given: every webhook of both configurations carries it.
    bundles = set()
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        config = json.loads(kubectl(run.plane, "get", kind, "steer-webhook", "-o=json"))
        bundles |= {h["clientConfig"].get("caBundle") for h in config["webhooks"]}
    (bundle,) = bundles
    assert bundle, "the controller's leader left a webhook without caBundle"
    (folder / "ca.crt").write_bytes(base64.b64decode(bundle))
    ca = x509.load_pem_x509_certificate((folder / "ca.crt").read_bytes())
    served = x509.load_pem_x509_certificate((folder / "tls.crt").read_bytes())
    served.verify_directly_issued_by(ca)
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "steer-webhook.kube-steer.svc" in names.get_values_for_type(x509.DNSName)
    serve_webhook(run)


def serve_webhook(run: Installation) -> None:
    """The webhook's process on its Service's ClusterIP:443, with the mounted certificate
    (`start_webhook`) and the policy source of the installed Deployment."""
    folder = run.scratch("mounted-tls")
    policy_file, resource = installed_policy_source(run, "steer-webhook")
    run.webhook = run.stack.enter_context(
        running_webhook(
            run.plane,
            policy_file,
            run.scratch("webhook"),
            policy_resource=resource,
            listen=f"{run.cluster_ip('steer-webhook')}:443",
            certificate=ServingCertificate(
                folder / "tls.crt", folder / "tls.key", folder / "ca.crt"
            ),
            kubeconfig=run.account_kubeconfig("steer-webhook"),
            workers=1,
        )
    )


def _issued_and_trusted(run: Installation) -> dict[str, Any] | None:
    """The webhook's Secret once it exists and every webhook of both configurations has a
    caBundle; None until then."""
    found = run.plane.kubectl(
        "-n", NS, "get", "secret", "steer-webhook-tls", "-o=json", "--ignore-not-found"
    )
    if not found.strip():
        return None
    secret: dict[str, Any] = json.loads(found)
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        config = json.loads(kubectl(run.plane, "get", kind, "steer-webhook", "-o=json"))
        if not all(h["clientConfig"].get("caBundle") for h in config["webhooks"]):
            return None
    return secret


def installed_flags(run: Installation, deployment: str) -> list[str]:
    """The installed Deployment's flags after its `--listen ADDRESS`: what its pods would run
    with, but the policy file and the address, which the test gives."""
    found = json.loads(kubectl(run.plane, "-n", NS, "get", "deployment", deployment, "-o=json"))
    (container,) = found["spec"]["template"]["spec"]["containers"]
    args: list[str] = container["args"]
    return args[args.index("--listen") + 2 :]


def installed_policy_source(run: Installation, deployment: str) -> tuple[Path | None, str | None]:
    """Where the installed Deployment's process reads its policy: the mounted ConfigMap
    (`--policy FILE`: the file, as `installed_policy`) or a SteeringPolicy
    (`--policy-resource NAME`, or `=NAME`: its name)."""
    found = json.loads(kubectl(run.plane, "-n", NS, "get", "deployment", deployment, "-o=json"))
    (container,) = found["spec"]["template"]["spec"]["containers"]
    args: list[str] = container["args"]
    for i, arg in enumerate(args):
        if arg == "--policy-resource":
            return None, args[i + 1]
        if arg.startswith("--policy-resource="):
            return None, arg.split("=", 1)[1]
    return run.installed_policy(), None


def start_controller(run: Installation) -> None:
    """`rollout status deployment/steer-controller`: the controller, from this checkout, as
    its ServiceAccount, with the installed Deployment's flags (its leader renews the webhook's
    certificate and applies the admission policies with the installed RBAC, the guards in
    force)."""
    flags = installed_flags(run, "steer-controller")
    assert flags[0] == "--webhook-certs=renew", flags
    policy_file, resource = installed_policy_source(run, "steer-controller")
    run.controller = run.stack.enter_context(
        running_controller(
            run.plane,
            policy_file,
            run.scratch("controller"),
            policy_resource=resource,
            kubeconfig=run.account_kubeconfig("steer-controller"),
            extra_args=flags,
        )
    )


def controller_stopped(run: Installation) -> None:
    """After `scale deployment steer-controller --replicas=0`: its pods would stop."""
    assert run.controller is not None
    run.controller.stop()


def start_scorer(run: Installation) -> None:
    """`rollout status deployment/steer-scorer`: the nodes appear (no kubelet registers them),
    then the scorer, from this checkout, on its Service's ClusterIP:8080, as its
    ServiceAccount, scoring from a Prometheus on loopback (the policy's URL is in-cluster).
    The admission policies and the webhook's certificate are the controller's
    (`start_controller`)."""
    for name in NODES:
        run.plane.add_node(name, cpu="8", memory="32Gi", zone="zone-a")
    serve_scorer(run)
    wait_until(
        "the scorer labelled every node",
        lambda: all(
            "kube-steer.github.io/score" in (n.metadata.labels or {})
            for n in client.CoreV1Api(run.plane.api_client()).list_node().items
        ),
        timeout=30,
        interval=0.2,
    )


def serve_scorer(run: Installation) -> None:
    """The scorer's process on its Service's ClusterIP:8080, with the policy source of the
    installed Deployment; returns once it has scored (`/readyz`)."""
    policy_file, resource = installed_policy_source(run, "steer-scorer")
    run.scorer = run.stack.enter_context(
        running_scorer(
            run.plane,
            policy_file,
            run.prom.url,
            run.scratch("scorer"),
            policy_resource=resource,
            listen=f"{run.cluster_ip('steer-scorer')}:8080",
            kubeconfig=run.account_kubeconfig("steer-scorer"),
            # As the manifest runs it: each caller is asked of the apiserver, through the
            # installed auth-delegator binding of the scorer's ServiceAccount.
            authorization="apiserver",
        )
    )
    run.scorer.wait_ready()


def rolled_out(run: Installation, deployment: str) -> None:
    """After a change of a Deployment's pod template (`kubectl patch deployment`): its pod is
    replaced by one running the new template. Here its process stops and starts again with
    the Deployment's policy source; for a SteeringPolicy, until it wrote its part of the
    object's status (the scorer's leader `status.scorer`, the controller's
    `status.admissionPolicies`)."""
    if deployment == "steer-scorer":
        assert run.scorer is not None
        run.scorer.stop()
        serve_scorer(run)
    elif deployment == "steer-webhook":
        assert run.webhook is not None
        run.webhook.stop()
        serve_webhook(run)
    else:
        assert deployment == "steer-controller" and run.controller is not None
        run.controller.stop()
        start_controller(run)
    _policy_file, resource = installed_policy_source(run, deployment)
    field = {"steer-scorer": "scorer", "steer-controller": "admissionPolicies"}.get(deployment)
    if resource is None or field is None:
        return

    def written() -> bool:
        found = kubectl(run.plane, "get", "steeringpolicy", resource, "-o=json")
        return bool((json.loads(found).get("status") or {}).get(field))

    wait_until(f"{deployment} wrote status.{field} of {resource}", written, timeout=30)


def explain_through_plugin(run: Installation, command: str) -> str:
    """`kubectl steer explain ...` as the page writes it, at the scorer directly (the
    apiserver's Service proxy needs the scorer's pod as an endpoint; here the scorer listens on
    the Service's ClusterIP) and with `--token` of an operator's ServiceAccount, as the page
    says a client-certificate user (the test's admin) does: the scorer asks the apiserver who
    that is and whether it may read nodes and pods."""
    assert run.scorer is not None
    token = run.facts.get("explain-token")
    if token is None:
        reader = "install-e2e-explain-reader"
        rules = {"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["get", "list"]}
        documents = [
            {"apiVersion": "v1", "kind": "ServiceAccount",
             "metadata": {"name": reader, "namespace": "default"}},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
             "metadata": {"name": reader}, "rules": [rules]},
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
             "metadata": {"name": reader},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": reader},
             "subjects": [{"kind": "ServiceAccount", "name": reader, "namespace": "default"}]},
        ]  # fmt: skip
        text = yaml.safe_dump_all(documents)
        kubectl(run.plane, "apply", "-f", "-", input=text)
        run.stack.callback(lambda: kubectl(run.plane, "delete", "-f", "-", input=text))
        token = kubectl(run.plane, "-n", "default", "create", "token", reader).strip()
        run.facts["explain-token"] = token
    flags = f" --scorer {run.scorer.url} --token {token} -o json"

    def answered() -> str | None:  # the reader's binding reaches the authorizer's cache
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command + flags],
            cwd=run.workdir, env=run.shell_env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        return done.stdout if done.returncode == 0 else None

    out = wait_until(command, answered, timeout=30, interval=0.5)
    run.outputs[command] = out
    return out


def scorer_stopped(run: Installation) -> None:
    """After `scale deployment steer-scorer --replicas=0`: its pods would stop."""
    assert run.scorer is not None
    run.scorer.stop()


def webhook_stopped(run: Installation) -> None:
    """Its Deployment is deleted: its pods would stop."""
    assert run.webhook is not None
    run.webhook.stop()


def shell(run: Installation, command: str) -> str:
    if run.scorer is not None and "localhost:8080" in command:
        command = command.replace("localhost:8080", run.scorer.url.removeprefix("http://"))
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=run.workdir,
        env=run.shell_env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, f"{command}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def shell_env(
    plane: ControlPlane,
    bin_dir: Path,
    config_home: Path,
    tools: Mapping[str, Path] | None = None,
) -> dict[str, str]:
    """PATH with `kubectl` (v1.36, beside the binaries), `steer` (this checkout's code) and
    any other `tools` (name -> binary), e.g. helm."""
    bin_dir.mkdir()
    wrapped = {
        "kubectl": f'"{plane.bin_dir / "kubectl"}"',
        "steer": f'"{sys.executable}" -m launcher',
        # kubectl runs `kubectl steer` as the plugin on PATH (this checkout's, by PYTHONPATH)
        "kubectl-steer": f'"{sys.executable}" -c "import sys; from launcher.commands import '
        'kubectl_main; sys.exit(kubectl_main())"',
    }
    wrapped.update({name: f'"{path}"' for name, path in (tools or {}).items()})
    for name, command in wrapped.items():
        (bin_dir / name).write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        (bin_dir / name).chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PROMETHEUS_MULTIPROC_DIR",)}
    env.update(
        PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}",
        KUBECONFIG=str(plane.kubeconfig),
        PYTHONPATH=str(ROOT),  # `steer` runs this checkout, wherever the shell is
        XDG_CONFIG_HOME=str(config_home),  # where `steer certs` keeps its CA
        # helm's own files (repositories, cache) stay out of the user's home
        HELM_CONFIG_HOME=str(config_home / "helm"),
        HELM_CACHE_HOME=str(config_home / "helm-cache"),
        HELM_DATA_HOME=str(config_home / "helm-data"),
    )
    return env


def missing_commands(commands: Sequence[str]) -> list[str]:
    """The page's `steer` subcommands this checkout does not have (their --help fails)."""
    subcommands = {
        tuple(w for w in command.split()[1:3] if not w.startswith("-"))
        for command in commands
        if command.startswith("steer ")
    }
    return ["steer " + " ".join(sub) for sub in sorted(subcommands) if not has_subcommand(sub)]


def has_subcommand(words: Sequence[str]) -> bool:
    parser: argparse.ArgumentParser = build_parser()
    for word in words:
        (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if word not in action.choices:
            return False
        parser = action.choices[word]
    return True


def exists_node(core: client.CoreV1Api, name: str) -> bool:
    try:
        core.read_node(name)
    except client.ApiException:
        return False
    return True


def try_shell(run: Installation, command: str) -> str | None:
    with contextlib.suppress(AssertionError):
        out = shell(run, command)
        return out or None
    return None
