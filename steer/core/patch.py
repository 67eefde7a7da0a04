"""JSON Patch (RFC 6902) built from intended field values, without diffing the whole pod, and
applied to a pod without copying it whole.

The apiserver rejects a patch whose `add` target has no parent ("doc is missing path"), so a
value under a missing object is added as one nested object at the first missing ancestor. Keys
are escaped per RFC 6901 (`kube-steer.github.io/trace` is `kube-steer.github.io~1trace`). Only objects and lists the
mutation touches are walked, which keeps the request path cheap for a 10 KiB pod.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

Path = tuple[str, ...]


class ShapeError(ValueError):
    """A field the mutation must walk has the wrong JSON type; `field` is its dotted path."""

    def __init__(self, field: str, expected: str, got: Any) -> None:
        super().__init__(f"{field}: expected {expected}, got {type(got).__name__}")
        self.field = field


def escape(token: str) -> str:
    """One RFC 6901 reference token: `~` first, so `/` -> `~1` is not re-escaped."""
    return token.replace("~", "~0").replace("/", "~1")


@functools.lru_cache(maxsize=1024)
def pointer(path: tuple[str, ...]) -> str:
    """The JSON Pointer of `path` (cached: the webhook patches the same few paths)."""
    return "".join("/" + escape(part) for part in path)


def unescape(token: str) -> str:
    """The inverse of `escape`: `~1` first, so `~01` stays `~1`."""
    return token.replace("~1", "/").replace("~0", "~")


def _dotted(path: Sequence[str]) -> str:
    return ".".join(path)


class PatchBuilder:
    """Collects `set` and `append` intentions against one document and emits the ops."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        self._doc = doc
        self._ops: list[dict[str, Any]] = []
        # Values to create under missing ancestors, keyed by that ancestor's path.
        self._created: dict[Path, dict[str, Any] | Any] = {}

    def _walk(self, path: Path) -> tuple[int, Any]:
        """(depth of the deepest existing prefix, the value there); None counts as missing."""
        node: Any = self._doc
        for depth, key in enumerate(path):
            # A parsed request holds only dicts and lists: test those types before the ABC.
            if type(node) is dict:
                child = node.get(key)
            elif isinstance(node, list):
                if key.isdigit() and int(key) < len(node):
                    node = node[int(key)]  # an existing list item (e.g. containers/0)
                    continue
                raise ShapeError(_dotted(path[:depth]), "an object", node)
            elif isinstance(node, Mapping):
                child = node.get(key)
            else:
                raise ShapeError(_dotted(path[:depth]), "an object", node)
            if child is None:
                return depth, node
            node = child
        return len(path), node

    def set(self, path: Path, value: Any) -> None:
        """Make `path` hold `value` (an `add`, which replaces an existing member)."""
        depth, _ = self._walk(path)
        if depth >= len(path) - 1:
            self._ops.append({"op": "add", "path": pointer(path), "value": value})
            return
        anchor = path[: depth + 1]
        nested: Any = value
        for key in reversed(path[depth + 1 :]):
            nested = {key: nested}
        existing = self._created.get(anchor)
        self._created[anchor] = _merge(existing, nested) if existing is not None else nested

    def set_members(self, path: Path, members: Mapping[str, Any]) -> None:
        """`set` each member of `members` under `path`, in order: the object there is walked
        to once, not once per member."""
        if not members:
            return
        depth, node = self._walk(path)
        if depth == len(path) and (type(node) is dict or isinstance(node, Mapping)):
            self.add_members(path, members)
            return
        for key, value in members.items():
            self.set((*path, key), value)

    def add_members(self, path: Path, members: Mapping[str, Any]) -> None:
        """`set` each member of `members` in the object at `path`, which the document has (the
        caller read it): nothing is walked."""
        ops = self._ops
        for key, value in members.items():
            ops.append({"op": "add", "path": pointer((*path, key)), "value": value})

    def remove(self, path: Path) -> None:
        """Remove the member at `path`, which must exist (the caller read it)."""
        self._ops.append({"op": "remove", "path": pointer(path)})

    def append(self, path: Path, items: Sequence[Any]) -> None:
        """Append `items` to the list at `path`, creating the list when it is absent."""
        if not items:
            return
        depth, node = self._walk(path)
        if depth < len(path):
            self.set(path, list(items))
            return
        if not isinstance(node, list):
            raise ShapeError(_dotted(path), "a list", node)
        where = pointer(path) + "/-"
        self._ops.extend({"op": "add", "path": where, "value": item} for item in items)

    def ops(self) -> list[dict[str, Any]]:
        created = [{"op": "add", "path": pointer(p), "value": v} for p, v in self._created.items()]
        return self._ops + created


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for key, value in b.items():
        if key in out and isinstance(out[key], dict) and isinstance(value, dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def apply_ops(doc: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """`doc` with `ops` applied: the `add` and `remove` ops `PatchBuilder` emits (`add` sets an
    object member, appends at `-` or inserts at a list index; `remove` deletes a member or an
    item). Objects and lists on an op's path are copied once; everything else is shared with
    `doc`, which is left unchanged. Raises ValueError for an op this module does not emit or a
    path that does not resolve."""
    out: dict[str, Any] = dict(doc)
    own = {id(out)}  # the containers copied here, which may be changed in place

    for op in ops:
        kind, where = op.get("op"), str(op.get("path", ""))
        tokens = [unescape(t) for t in where.split("/")[1:]]
        if kind not in ("add", "remove") or not tokens:
            raise ValueError(f"cannot apply {kind!r} at {where!r}")
        parent: Any = out
        try:
            for token in tokens[:-1]:
                key: Any = int(token) if isinstance(parent, list) else token
                child = parent[key]
                if id(child) not in own:
                    child = dict(child) if isinstance(child, Mapping) else list(child)
                    own.add(id(child))
                    parent[key] = child
                parent = child
            last = tokens[-1]
            if isinstance(parent, list):
                if kind == "remove":
                    del parent[int(last)]
                elif last == "-":
                    parent.append(op["value"])
                else:
                    parent.insert(int(last), op["value"])
            elif kind == "remove":
                del parent[last]
            else:
                parent[last] = op["value"]
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ValueError(f"cannot apply {kind!r} at {where!r}: {exc!r}") from None
    return out
