"""The namespace cache against the API stand-in: list, watch, reconnect, re-list on 410 Gone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kits.apistub import ApiStub
from kits.net import free_port
from kits.waiting import wait_until
from steer.adapters.kube import make_api_client
from webhook.namespaces import NamespaceCache


@pytest.fixture
def stub() -> Iterator[ApiStub]:
    server = ApiStub.start()
    server.add_namespace("team-a", {"tenant": "dept-a", "kube-steer.github.io/enabled": "true"})
    yield server
    server.stop()


@pytest.fixture
def cache(stub: ApiStub, tmp_path: Path) -> Iterator[NamespaceCache]:
    kubeconfig = str(stub.kubeconfig(tmp_path / "kubeconfig"))
    ns_cache = NamespaceCache(
        lambda: make_api_client(kubeconfig), watch_seconds=30, backoff_seconds=0.05
    )
    ns_cache.start()
    assert ns_cache.wait_synced(10)
    yield ns_cache
    ns_cache.stop()


def own(cache: NamespaceCache, name: str) -> dict[str, str] | None:
    """The namespace's labels without the one the apiserver sets on every namespace."""
    labels = cache.labels(name)
    if labels is None:
        return None
    assert labels["kubernetes.io/metadata.name"] == name
    return {k: v for k, v in labels.items() if k != "kubernetes.io/metadata.name"}


def lists(stub: ApiStub) -> int:
    """Lists of the namespaces: paginated, or streaming (a watch that starts with all of them)."""
    return sum(
        1
        for r in stub.requests
        if r.method == "GET"
        and r.path == "/api/v1/namespaces"
        and ("watch" not in r.query or "sendInitialEvents=true" in r.query)
    )


def test_lists_then_follows_adds_changes_and_deletes(stub: ApiStub, cache: NamespaceCache) -> None:
    assert own(cache, "team-a") == {"tenant": "dept-a", "kube-steer.github.io/enabled": "true"}
    assert own(cache, "kube-system") == {}  # known, with only the name label
    assert cache.labels("nope") is None
    stub.add_namespace("team-b", {"tenant": "dept-b"})
    wait_until(
        "team-b added",
        lambda: own(cache, "team-b") == {"tenant": "dept-b"},
        timeout=10,
        interval=0.02,
    )
    stub.modify(
        "namespaces",
        "team-b",
        lambda ns: {**ns, "metadata": {**ns["metadata"], "labels": {"tenant": "dept-a"}}},
    )
    wait_until(
        "team-b relabelled",
        lambda: own(cache, "team-b") == {"tenant": "dept-a"},
        timeout=10,
        interval=0.02,
    )
    stub.delete("namespaces", "team-b")
    wait_until("team-b deleted", lambda: cache.labels("team-b") is None, timeout=10, interval=0.02)
    status = cache.status()
    assert status.synced and status.relists == 1 and status.last_error is None
    assert status.resource_version == str(stub.resource_version)
    assert lists(stub) == 1


def test_dropped_watch_resumes_without_a_new_list(stub: ApiStub, cache: NamespaceCache) -> None:
    stub.drop_watches()
    stub.add_namespace("after-drop", {"x": "1"})
    wait_until(
        "after-drop added",
        lambda: own(cache, "after-drop") == {"x": "1"},
        timeout=10,
        interval=0.02,
    )
    assert lists(stub) == 1 and cache.status().relists == 1


def test_gone_watch_history_triggers_a_relist(stub: ApiStub, cache: NamespaceCache) -> None:
    # Hold the reconnecting watch back, change the cluster while it is away, then expire the
    # history it would resume from: the apiserver answers 410 and only a fresh list catches up.
    stub.delay(0.3)
    stub.drop_watches()
    stub.add_namespace("while-away", {"tenant": "dept-b"})
    stub.expire_watch_history()
    wait_until(
        "while-away added after the re-list",
        lambda: own(cache, "while-away") == {"tenant": "dept-b"},
        timeout=10,
        interval=0.02,
    )
    stub.delay(0)
    assert cache.status().relists == 2
    assert lists(stub) == 2


def test_unreachable_apiserver_is_retried_not_fatal(tmp_path: Path) -> None:
    stub = ApiStub.start(port=free_port())
    kubeconfig = str(stub.kubeconfig(tmp_path / "kubeconfig"))
    stub.stop()
    ns_cache = NamespaceCache(lambda: make_api_client(kubeconfig), backoff_seconds=0.05)
    ns_cache.start()
    try:
        wait_until(
            "the unreachable apiserver reported",
            lambda: ns_cache.status().last_error is not None,
            timeout=10,
            interval=0.02,
        )
        assert not ns_cache.synced and ns_cache.labels("default") is None
    finally:
        ns_cache.stop()
