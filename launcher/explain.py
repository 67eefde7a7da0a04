"""What `steer explain|audit|page` and `kubectl steer` print: clients of a running scorer,
over any way of reaching it (the command tree, launcher.commands, declares the commands, and
the fronts, launcher.front and launcher.kubectl, say how to reach it)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from launcher.page_relay import page_relay
from launcher.scorer_client import ScorerClient, ScorerError
from scorer.cli import split_listen
from scorer.explain.render import audit_text, node_text, nodes_text, pod_text
from scorer.explain.view import AuditReport, NodeDetail, NodesTable, PodExplanation, Served

DEFAULT_SCORER_URL = "http://127.0.0.1:8080"


def _answer(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except ScorerError as exc:
        raise SystemExit(str(exc)) from None


def _print(body: Any, output: str, text: Callable[[Any], str]) -> int:
    print(json.dumps(body, indent=2) if output == "json" else text(body))
    return 0


# The explain commands over any way of reaching the scorer (each front of the tree says which).


def explain_node(scorer: ScorerClient, name: str, output: str) -> int:
    body = _answer(lambda: scorer.get(f"/explain/node/{quote(name)}"))
    return _print(body, output, lambda b: node_text(NodeDetail.from_json(b), Served.from_json(b)))


def explain_nodes(scorer: ScorerClient, output: str) -> int:
    body = _answer(lambda: scorer.get("/explain/nodes"))
    return _print(body, output, lambda b: nodes_text(NodesTable.from_json(b), Served.from_json(b)))


def _pod_text(body: Any) -> str:
    return pod_text(PodExplanation.from_json(body), Served.from_json(body))


def explain_pod_ref(scorer: ScorerClient, namespace: str, name: str, output: str) -> int:
    body = _answer(lambda: scorer.get(f"/explain/pod/{quote(namespace)}/{quote(name)}"))
    return _print(body, output, _pod_text)


def explain_pod_manifest(
    scorer: ScorerClient,
    file: str,
    namespace: str | None,
    output: str,
    fallback_namespace: Callable[[], str] | None = None,
) -> int:
    """FILE ('-' for stdin) is a Pod or PodSpec in YAML or JSON; `namespace` picks the tenant,
    else the manifest's own, else `fallback_namespace()` (kubectl's: the context's)."""
    try:
        text = sys.stdin.read() if file == "-" else Path(file).read_text()
    except OSError as exc:
        raise SystemExit(f"{file}: {exc.strerror or exc}") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SystemExit(f"{file}: not YAML or JSON: {exc}") from None
    metadata = doc.get("metadata") if isinstance(doc, dict) else None
    own = metadata.get("namespace") if isinstance(metadata, dict) else None
    if namespace is None and not own and fallback_namespace is not None:
        namespace = fallback_namespace()
    params = {"namespace": namespace} if namespace else {}
    body = _answer(
        lambda: scorer.post(
            "/explain/pod", text.encode(), params=params, content_type="application/yaml"
        )
    )
    return _print(body, output, _pod_text)


def audit_report(scorer: ScorerClient, limit: int, output: str) -> int:
    if limit < 1:
        raise SystemExit(f"--limit: a positive number of pods, got {limit}")
    # Each pod judged reads every node (about 80 ms at 5,000 nodes): allow for the limit.
    body = _answer(lambda: scorer.get(f"/explain/audit?limit={limit}", timeout_s=10 + 0.2 * limit))
    return _print(body, output, lambda b: audit_text(AuditReport.from_json(b), Served.from_json(b)))


def open_page(scorer: ScorerClient, listen: str) -> int:
    """The explain page at http://LISTEN/ until interrupted, every request relayed to the
    scorer with the user's token (launcher.page_relay)."""
    host, port = split_listen(listen)
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"--listen: a loopback address (it acts as you), got {host!r}")
    try:
        server = page_relay(scorer, host, port)
    except OSError as exc:
        raise SystemExit(f"--listen {listen}: {exc.strerror or exc}") from None
    bound = server.server_address[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"the explain page of {scorer.where}: http://{shown}:{bound}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def split_pod_ref(ref: str, flag: str) -> tuple[str, str]:
    """NAMESPACE/NAME → (namespace, name); `flag` names the argument in the error."""
    namespace, sep, name = ref.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise SystemExit(f"{flag}: expected NAMESPACE/NAME, got {ref!r}")
    return namespace, name
