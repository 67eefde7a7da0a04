"""What the answering replica adds to every `/explain` answer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Json = Mapping[str, Any]  # a JSON object as answered, read back


@dataclass(frozen=True)
class Served:
    """What the answering replica adds to every `/explain` answer (scorer/app.py): whether it
    is the leader (it writes what it explains), and notes on what it could not read."""

    leader: bool | None = None
    notes: tuple[str, ...] = ()

    @classmethod
    def from_json(cls, obj: Json) -> Served:
        return cls(leader=obj.get("leader"), notes=tuple(obj.get("notes") or ()))
