"""Who may read what the scorer serves (scorer/access/): the rules per endpoint, the bounded
cache, and the scorer's HTTP surface over real HTTP with the reviews answered by a fake
apiserver over real HTTP (TokenReview, SubjectAccessReview): allowed, denied (403),
unauthenticated (401), the apiserver down (503, fail closed) and what stays cached. The
clients (`Authorization`, `X-Steer-Authorization`) and the page relay too.

The real apiserver's answers are in tests/e2e/test_explain_access.py.
"""

from __future__ import annotations

import ast
import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client

from kits.apistub import ApiStub
from kits.prometheus_server import PrometheusServer
from kits.synthetic_exporter import SyntheticCluster
from launcher.page_relay import page_relay
from launcher.scorer_client import DirectScorer, ProxiedScorer, ScorerError
from scorer.access.cache import TtlCache
from scorer.access.gate import TOKEN_HEADER, bearer_token
from scorer.access.reviews import ApiserverReviews, ReviewSettings, ReviewUnavailable
from scorer.access.rules import (
    AUTHENTICATED,
    LIST_NODES,
    LIST_PODS,
    METRICS,
    PUBLIC,
    Caller,
    NonResourceNeed,
    Requirement,
    ResourceNeed,
    requirement,
)
from scorer.app import create_app
from scorer.cycle.service import Scorer
from scorer.cycle.writer import NodeApi
from steer.adapters.http_server import HttpServer
from steer.adapters.kubejson import KubeJson
from steer.core.policy import parse_policy
from tests.apistub_fixtures import client_for
from tests.scorer_support import SMALL_POLICY, backfilled_prometheus, stub_nodes

ACCESS = Path(__file__).resolve().parent.parent / "scorer" / "access"
POLICY = parse_policy(SMALL_POLICY)
NODES = ("node-1", "node-2", "node-3")
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web", "namespace": "team-a"},
    "spec": {"containers": [{"name": "main", "image": "web"}]},
}


# ---- a fake apiserver: the two reviews, over real HTTP -----------------------------------------


@dataclass
class FakeReviews:
    """Tokens → users, and the permissions each user holds as (verb, resource, namespace) or
    (verb, non-resource path); "" as the namespace grants every namespace."""

    tokens: dict[str, str] = field(default_factory=dict)
    grants: dict[str, set[tuple[str, str, str]]] = field(default_factory=dict)
    token_reviews: int = 0
    access_reviews: int = 0
    status: int = 200  # 500: the apiserver fails; 403: the scorer may not create reviews
    seen: list[dict[str, Any]] = field(default_factory=list)

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.status != 200:
            return self.status, {"kind": "Status", "message": "fake failure", "reason": "x"}
        spec = body["spec"]
        self.seen.append(body)
        if path.endswith("/tokenreviews"):
            self.token_reviews += 1
            user = self.tokens.get(spec["token"])
            if user is None:
                return 201, {"status": {"authenticated": False, "error": "invalid token"}}
            groups = ["system:authenticated"]
            return 201, {
                "status": {"authenticated": True, "user": {"username": user, "groups": groups}}
            }
        self.access_reviews += 1
        grants = self.grants.get(spec["user"], set())
        if "nonResourceAttributes" in spec:
            attrs = spec["nonResourceAttributes"]
            allowed = (attrs["verb"], attrs["path"], "") in grants
        else:
            attrs = spec["resourceAttributes"]
            ns = attrs.get("namespace", "")
            allowed = (attrs["verb"], attrs["resource"], "") in grants or (
                bool(ns) and (attrs["verb"], attrs["resource"], ns) in grants
            )
        return 201, {"status": {"allowed": allowed}}


@contextlib.contextmanager
def fake_apiserver(reviews: FakeReviews) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, body = reviews.answer(self.path, json.loads(raw))
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def kube_at(url: str) -> KubeJson:
    config = client.Configuration(host=url)
    return KubeJson(client.ApiClient(config))


TENANT = "tenant-a"
OPERATOR = "operator"
PROMETHEUS = "system:serviceaccount:monitoring:prometheus"


@pytest.fixture
def reviews() -> FakeReviews:
    return FakeReviews(
        tokens={"t-tenant": TENANT, "t-operator": OPERATOR, "t-prom": PROMETHEUS},
        grants={
            TENANT: {("get", "pods", "team-a")},
            OPERATOR: {("get", "nodes", ""), ("list", "nodes", ""), ("list", "pods", "")},
            PROMETHEUS: {("get", "/metrics", "")},
        },
    )


@pytest.fixture(scope="module")
def prom() -> Iterator[PrometheusServer]:
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2)
    for name, util in zip(NODES, (20, 50, 95), strict=True):
        cluster.set_gpu_util(name, util)
    with backfilled_prometheus(cluster, span_s=240) as server:
        yield server


@pytest.fixture
def scored(apistub: ApiStub, tmp_path: Path, prom: PrometheusServer) -> Scorer:
    stub_nodes(apistub, NODES)
    apistub.add_namespace("team-a", {})
    apistub.add_namespace("team-b", {})
    apistub.create("pods", POD)
    apistub.create("pods", {**POD, "metadata": {"name": "db", "namespace": "team-b"}})
    kube = client_for(apistub, tmp_path / "kubeconfig")
    scorer = Scorer(lambda: POLICY, NodeApi(KubeJson(kube)), prometheus_url=prom.url)
    scorer.run_cycle()
    return scorer


@contextlib.contextmanager
def serving(
    scorer: Scorer, reviews: FakeReviews, **settings: Any
) -> Iterator[tuple[str, ApiserverReviews]]:
    with fake_apiserver(reviews) as api_url:
        access = ApiserverReviews(kube_at(api_url), ReviewSettings(**settings))
        with HttpServer(create_app(scorer, access=access)) as server:
            yield server.url, access


def get(url: str, token: str | None = None, header: str = "Authorization") -> requests.Response:
    headers = {header: f"Bearer {token}"} if token else {}
    with requests.Session() as s:
        s.trust_env = False
        return s.get(url, headers=headers, timeout=10)


DATA_PATHS = (
    "/",
    "/ui/page.js",
    "/metrics",
    "/explain/nodes",
    "/explain/node/node-1",
    "/explain/cluster",
    "/explain/audit",
    "/explain/pod/team-a/web",
    "/explain/anything-else",
)


# ---- the rules, pure ------------------------------------------------------------------------


def test_each_endpoint_needs_what_its_answer_holds() -> None:
    assert requirement("GET", "/healthz") is PUBLIC
    assert requirement("GET", "/readyz") is PUBLIC
    assert requirement("GET", "/metrics") == Requirement(needs=(METRICS,))
    assert requirement("GET", "/") is AUTHENTICATED
    assert requirement("GET", "/ui/page.js") is AUTHENTICATED
    assert requirement("GET", "/explain/nodes").needs == (LIST_NODES,)
    assert requirement("GET", "/explain/cluster").needs == (LIST_NODES,)
    assert requirement("GET", "/explain/audit").needs == (LIST_PODS, LIST_NODES)
    assert requirement("GET", "/explain/node/gpu-1").needs == (
        ResourceNeed("get", "nodes", name="gpu-1"),
    )
    assert requirement("GET", "/explain/pod/team-a/web").needs == (
        ResourceNeed("get", "pods", "team-a", "web"),
    )
    assert requirement("POST", "/explain/pod") == Requirement(by_handler=True)
    # Anything else (a 404 to be) still needs a caller the apiserver knows.
    for path in ("/explain", "/explain/pod/a", "/nope", "/healthz/x", "/metricsx"):
        assert requirement("GET", path) is AUTHENTICATED, path


def test_needs_read_as_the_permission_they_ask() -> None:
    assert ResourceNeed("get", "pods", "team-a").describe() == "get pods in namespace 'team-a'"
    assert LIST_PODS.describe() == "list pods in every namespace"
    assert ResourceNeed("get", "nodes", name="n1").describe() == "get nodes 'n1'"
    assert METRICS.describe() == "get on the non-resource URL /metrics"
    assert METRICS.attributes() == {"nonResourceAttributes": {"verb": "get", "path": "/metrics"}}
    assert ResourceNeed("get", "pods", "a", "web").attributes() == {
        "resourceAttributes": {
            "verb": "get",
            "group": "",
            "resource": "pods",
            "namespace": "a",
            "name": "web",
        }
    }
    caller = Caller.from_review(
        {"username": "u", "uid": "1", "groups": ["g"], "extra": {"b": ["2"], "a": ["1"]}}
    )
    assert caller.subject() == {
        "user": "u",
        "groups": ["g"],
        "uid": "1",
        "extra": {"a": ["1"], "b": ["2"]},
    }


def test_bearer_tokens_are_read_in_any_case_and_nothing_else_is() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    for value in (None, "", "Bearer", "Bearer ", "Basic dXNlcg==", "abc"):
        assert bearer_token(value) is None, value


def test_the_rules_and_the_cache_do_no_io() -> None:
    """Pure, as the planning and the explanation are (the import contract in pyproject.toml
    names those): what they import is the standard library's data types and each other."""
    allowed = {
        "__future__",
        "collections",
        "collections.abc",
        "dataclasses",
        "typing",
        "threading",
        "time",
        "scorer.access.rules",
    }
    for module in ("rules", "cache"):
        tree = ast.parse((ACCESS / f"{module}.py").read_text())
        imported = {
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        assert imported <= allowed, f"scorer/access/{module}.py imports {imported - allowed}"


# ---- the cache ------------------------------------------------------------------------------


def test_the_cache_forgets_after_its_ttl_and_holds_at_most_its_bound() -> None:
    now = [0.0]
    cache: TtlCache[str, int] = TtlCache(3, clock=lambda: now[0])
    cache.put("a", 1, 10)
    now[0] = 9.9
    assert cache.get("a") == 1
    now[0] = 10.0
    assert cache.get("a") is None and len(cache) == 0
    for i, key in enumerate("abcd"):
        cache.put(key, i, 10)
    assert len(cache) == 3 and cache.get("a") is None  # the least recently used went
    cache.get("b")  # used: now the newest
    cache.put("e", 4, 10)
    assert cache.get("b") == 1 and cache.get("c") is None
    cache.put("z", 0, 0)  # a ttl of 0 caches nothing
    assert cache.get("z") is None


def test_ten_thousand_distinct_tokens_keep_the_caches_at_their_bound(reviews: FakeReviews) -> None:
    with fake_apiserver(reviews) as url:
        access = ApiserverReviews(kube_at(url), ReviewSettings(max_entries=64))
        for i in range(2_000):
            assert access.authenticate(f"bogus-{i}") is None
        assert len(access._tokens) == 64
        caller = access.authenticate("t-operator")
        assert caller is not None
        for i in range(200):
            access.allowed(caller, ResourceNeed("get", "nodes", name=f"n{i}"))
        assert len(access._decisions) == 64


# ---- the scorer's HTTP surface, with the fake apiserver ------------------------------------


def test_without_a_token_every_data_path_is_401_and_the_probes_answer(
    scored: Scorer, reviews: FakeReviews
) -> None:
    with serving(scored, reviews) as (url, _access):
        for path in DATA_PATHS:
            answer = get(url + path)
            assert answer.status_code == 401, path
            assert answer.headers["WWW-Authenticate"].startswith("Bearer")
            assert "no bearer token" in answer.json()["error"]
        assert get(url + "/healthz").status_code == 200
        readyz = get(url + "/readyz")
        assert readyz.status_code == 200
        assert "node-1" not in readyz.text and "team-a" not in readyz.text
        # A token the apiserver does not know is 401 too.
        for path in DATA_PATHS:
            assert get(url + path, "stolen").status_code == 401, path
    assert reviews.access_reviews == 0


def test_a_tenant_explains_its_own_pod_and_nothing_else(
    scored: Scorer, reviews: FakeReviews
) -> None:
    with serving(scored, reviews) as (url, _access):
        own = get(url + "/explain/pod/team-a/web", "t-tenant")
        assert own.status_code == 200, own.text
        assert own.json()["namespace"] == "team-a"
        other = get(url + "/explain/pod/team-b/db", "t-tenant")
        assert other.status_code == 403
        assert other.json()["error"] == (
            "'tenant-a' may not get pods 'db' in namespace 'team-b', which "
            "/explain/pod/team-b/db needs"
        )
        # A pod that does not exist in a namespace it may not read: 403, not 404.
        assert get(url + "/explain/pod/team-b/nope", "t-tenant").status_code == 403
        assert get(url + "/explain/pod/team-a/nope", "t-tenant").status_code == 404
        for path in ("/explain/nodes", "/explain/node/node-1", "/explain/audit", "/metrics"):
            assert get(url + path, "t-tenant").status_code == 403, path
        # The page's own files: any caller the apiserver knows.
        assert get(url + "/", "t-tenant").status_code == 200
        # Through the apiserver's Service proxy the token comes in X-Steer-Authorization.
        proxied = get(url + "/explain/pod/team-a/web", "t-tenant", header=TOKEN_HEADER)
        assert proxied.status_code == 200


def test_a_posted_pod_needs_get_pods_in_the_namespace_it_names(
    scored: Scorer, reviews: FakeReviews
) -> None:
    def post(url: str, body: dict[str, Any], query: str = "") -> requests.Response:
        with requests.Session() as s:
            s.trust_env = False
            return s.post(
                f"{url}/explain/pod{query}",
                json=body,
                headers={"Authorization": "Bearer t-tenant"},
                timeout=10,
            )

    with serving(scored, reviews) as (url, _access):
        assert post(url, POD).status_code == 200
        assert post(url, POD, "?namespace=team-b").status_code == 403
        other = {**POD, "metadata": {"name": "x", "namespace": "team-b"}}
        assert post(url, other).status_code == 403
        assert post(url, other, "?namespace=team-a").status_code == 200
        # No namespace at all: judged as no tenant's, for readers of every namespace only.
        nameless = {"spec": POD["spec"]}
        assert post(url, nameless).status_code == 403


def test_an_operator_reads_the_node_views_and_prometheus_the_metrics(
    scored: Scorer, reviews: FakeReviews
) -> None:
    with serving(scored, reviews) as (url, _access):
        for path in ("/explain/nodes", "/explain/node/node-1", "/explain/audit"):
            assert get(url + path, "t-operator").status_code == 200, path
        assert get(url + "/metrics", "t-operator").status_code == 403
        metrics = get(url + "/metrics", "t-prom")
        assert metrics.status_code == 200 and "steer_scorer_cycle_duration_seconds" in metrics.text
        assert get(url + "/explain/nodes", "t-prom").status_code == 403
    review = next(r for r in reviews.seen if r["kind"] == "SubjectAccessReview")
    assert review["apiVersion"] == "authorization.k8s.io/v1"
    assert review["spec"]["groups"] == ["system:authenticated"]


def test_answers_are_cached_briefly_and_a_role_change_takes_effect_after_the_ttl(
    scored: Scorer, reviews: FakeReviews
) -> None:
    with serving(scored, reviews, allow_ttl_s=0.5, deny_ttl_s=0.5, token_ttl_s=0.5) as (url, _a):
        for _ in range(5):
            assert get(url + "/explain/node/node-1", "t-operator").status_code == 200
        assert (reviews.token_reviews, reviews.access_reviews) == (1, 1)
        reviews.grants[OPERATOR].discard(("get", "nodes", ""))
        assert get(url + "/explain/node/node-1", "t-operator").status_code == 200  # cached
        threading.Event().wait(0.6)
        assert get(url + "/explain/node/node-1", "t-operator").status_code == 403
        assert (reviews.token_reviews, reviews.access_reviews) == (2, 2)


def test_when_the_apiserver_cannot_answer_no_data_is_served(
    scored: Scorer, reviews: FakeReviews
) -> None:
    with serving(scored, reviews) as (url, access):
        assert get(url + "/explain/node/node-1", "t-operator").status_code == 200
        reviews.status = 500
        # Answers already cached still count (for their 10 s) ...
        assert get(url + "/explain/node/node-1", "t-operator").status_code == 200
        # ... anything else is refused: 503, with a retry hint.
        down = get(url + "/explain/node/node-2", "t-operator")
        assert down.status_code == 503 and down.headers["Retry-After"] == "5"
        assert "could not be checked" in down.json()["error"]
        assert get(url + "/explain/pod/team-a/web", "t-tenant").status_code == 503
        assert get(url + "/healthz").status_code == 200
        reviews.status = 403  # the scorer's ServiceAccount lacks system:auth-delegator
        refused = get(url + "/metrics", "t-prom")
        assert refused.status_code == 503
        assert "system:auth-delegator" in refused.json()["error"]
        # Failures are not cached: the next answer counts as soon as the apiserver is back.
        reviews.status = 200
        assert get(url + "/metrics", "t-prom").status_code == 200
    with pytest.raises(ReviewUnavailable, match="no connection"):
        ApiserverReviews(kube_at(url), ReviewSettings(timeout_s=1)).authenticate("t-prom")
    assert access.counts.cached >= 2


def test_without_access_every_caller_is_answered(scored: Scorer) -> None:
    """`--authorization none` (in-process tests, the no-cluster demo)."""
    with HttpServer(create_app(scored)) as server:
        assert get(server.url + "/explain/pod/team-b/db").status_code == 200
        assert get(server.url + "/metrics").status_code == 200


# ---- the clients and the page relay ---------------------------------------------------------


def test_the_direct_client_sends_its_token_and_says_what_a_401_means(
    scored: Scorer, reviews: FakeReviews
) -> None:
    with serving(scored, reviews) as (url, _access):
        body = DirectScorer(url, token="t-tenant").get("/explain/pod/team-a/web")
        assert body["namespace"] == "team-a"
        with pytest.raises(ScorerError, match=r"no bearer token was sent.*--token"):
            DirectScorer(url).get("/explain/pod/team-a/web")
        with pytest.raises(ScorerError, match="did not accept the token"):
            DirectScorer(url, token="stolen").get("/explain/pod/team-a/web")
        with pytest.raises(ScorerError, match="HTTP 403: 'tenant-a' may not get pods"):
            DirectScorer(url, token="t-tenant").get("/explain/pod/team-b/db")


def test_the_proxied_client_sends_the_kubeconfig_token_again_for_the_scorer() -> None:
    seen: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers)
            data = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
        config.api_key = {"authorization": "Bearer kube-token"}
        assert ProxiedScorer(client.ApiClient(config)).get("/explain/nodes") == {"ok": True}
        assert ProxiedScorer(client.ApiClient(config), token="given").get("/x") == {"ok": True}
        certificate_user = client.Configuration(host=config.host)
        ProxiedScorer(client.ApiClient(certificate_user)).get("/explain/nodes")
    finally:
        server.shutdown()
        server.server_close()
    assert seen[0]["Authorization"] == "Bearer kube-token"
    assert seen[0][TOKEN_HEADER] == "Bearer kube-token"
    assert seen[1][TOKEN_HEADER] == "Bearer given"
    assert TOKEN_HEADER not in seen[2] and "Authorization" not in seen[2]


def test_the_page_relay_asks_as_the_user_and_only_for_a_loopback_host(
    scored: Scorer, reviews: FakeReviews
) -> None:
    with serving(scored, reviews) as (url, _access):
        relay = page_relay(DirectScorer(url, token="t-tenant"), port=0)
        threading.Thread(target=relay.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{relay.server_address[1]}"
        try:
            page = get(base + "/")
            assert page.status_code == 200 and "<html" in page.text.lower()
            assert page.headers["Content-Security-Policy"].startswith("default-src 'none'")
            assert get(base + "/explain/pod/team-a/web").status_code == 200
            assert get(base + "/explain/pod/team-b/db").status_code == 403
            with requests.Session() as s:
                s.trust_env = False
                rebound = s.get(base + "/", headers={"Host": "evil.example"}, timeout=10)
                assert rebound.status_code == 403
                posted = s.post(base + "/explain/pod", json=POD, timeout=10)
                assert posted.status_code == 200 and posted.json()["namespace"] == "team-a"
        finally:
            relay.shutdown()
            relay.server_close()


def test_non_resource_needs_are_cached_per_caller(reviews: FakeReviews) -> None:
    with fake_apiserver(reviews) as url:
        access = ApiserverReviews(kube_at(url))
        prom_caller = access.authenticate("t-prom")
        tenant = access.authenticate("t-tenant")
        assert prom_caller is not None and tenant is not None
        assert access.allowed(prom_caller, NonResourceNeed("get", "/metrics"))
        assert not access.allowed(tenant, NonResourceNeed("get", "/metrics"))
        assert access.allowed(prom_caller, METRICS)
        assert reviews.access_reviews == 2
