"""The test kit's control plane sized for 100,000 pods."""

from __future__ import annotations

from typing import Any

from kits.control_plane import ControlPlane

ETCD_QUOTA_BYTES = 8 * 1024**3  # default 2 GiB: 100,000 pods and their status revisions near it


class ScalePlane(ControlPlane):
    """The test kit's control plane with etcd's backend quota raised (its default 2 GiB is
    within reach of 100,000 pods, each written twice)."""

    def _launch(self, name: str, args: list[str], ready_url: str, timeout: float) -> Any:
        if name == "etcd":
            args = [*args, f"--quota-backend-bytes={ETCD_QUOTA_BYTES}"]
        return super()._launch(name, args, ready_url, timeout)
