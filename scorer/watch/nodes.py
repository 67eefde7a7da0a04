"""Every Node in memory, kept current by list + watch, so a scoring cycle lists nothing.

Listing 5,000 real Nodes (8-10 KB of JSON each, most of it the image list) cost a cycle about
1 s of CPU in decoding alone, every interval, for objects of which few had changed. The
`NodeWatcher` lists once, then follows the watch; each Node is kept reduced to a `NodeState`.

The answers to the scorer's own writes go in too (`offer`): the node as written is known at
once, before the watch reports it, so a refresh right after a write plans from the written
node. Either way the newer of two states of a node wins, by resourceVersion: an event that
was on its way before a write was answered must not bring back the node as it was before it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from kubernetes import client

from scorer.model import NodeState
from steer.adapters.kubejson import node_path
from steer.adapters.listwatch import ListWatcher

log = logging.getLogger(__name__)


def newer(candidate: str, held: str) -> bool:
    """Whether a node at resourceVersion `candidate` is at least as new as one at `held`.
    Versions are opaque to clients by contract; the apiserver's (etcd revisions) are integers
    that only grow, and that is the only case where two are compared. Anything else: the
    candidate, which is what arrived last."""
    try:
        return int(candidate) >= int(held)
    except ValueError:
        return True


class NodeCache:
    """The nodes by name; thread-safe. `synced` once a list has filled it and until the watch
    breaks (then the next list refills it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeState] = {}
        self._synced = threading.Event()
        self.generation = 0  # moves whenever a node is added, changed or removed
        self.listing = False  # a node watch is reading a list into this cache

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout_s: float) -> bool:
        """Wait until a list has filled the cache (at most `timeout_s`) when one is being read;
        whether the cache is synced."""
        if not self.listing:
            return self.synced
        return self._synced.wait(timeout_s)

    def nodes(self) -> tuple[NodeState, ...]:
        """Every node, in name order (the order a list returns them in)."""
        with self._lock:
            return tuple(self._nodes[name] for name in sorted(self._nodes))

    def get(self, name: str) -> NodeState | None:
        with self._lock:
            return self._nodes.get(name)

    def __len__(self) -> int:
        return len(self._nodes)

    def offer(self, state: NodeState) -> bool:
        """Take a node's state unless a newer one is held; True when taken."""
        with self._lock:
            held = self._nodes.get(state.name)
            if held is not None and not newer(state.resource_version, held.resource_version):
                return False
            self._nodes[state.name] = state
            self.generation += 1
            return True

    def remove(self, name: str) -> None:
        with self._lock:
            if self._nodes.pop(name, None) is not None:
                self.generation += 1

    def replace(self, states: Iterable[NodeState]) -> None:
        """A fresh list: these are all the nodes. A node written since the list was taken keeps
        its newer state."""
        fresh = {state.name: state for state in states}
        with self._lock:
            for name, state in fresh.items():
                held = self._nodes.get(name)
                if held is not None and not newer(state.resource_version, held.resource_version):
                    fresh[name] = held
            self._nodes = fresh
            self.generation += 1
        self._synced.set()

    def desync(self) -> None:
        self._synced.clear()


class NodeWatcher(ListWatcher):
    """Keeps a `NodeCache` by list + watch of every Node."""

    path = node_path()
    thread_name = "nodes"

    def __init__(self, api_client: client.ApiClient, cache: NodeCache, **kwargs: Any) -> None:
        super().__init__(api_client, **kwargs)
        self.cache = cache

    def before_start(self) -> None:
        self.cache.listing = True  # a first cycle now waits for this list

    def on_list(self, items: Iterable[dict[str, Any]]) -> None:
        self.cache.listing = True
        try:
            self.cache.replace(NodeState.from_k8s(obj) for obj in items)
        finally:
            self.cache.listing = False
        log.info("node list: %d nodes", len(self.cache))

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self.cache.remove(str((obj.get("metadata") or {}).get("name", "")))
        elif kind in ("ADDED", "MODIFIED"):
            self.cache.offer(NodeState.from_k8s(obj))

    def on_restart(self) -> None:
        self.cache.desync()
        self.cache.listing = True  # a list follows: cycles wait for it rather than list too
