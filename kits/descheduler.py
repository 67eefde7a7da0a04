"""The real descheduler for the test kit: one cycle (`--descheduling-interval 0`) against a
`ControlPlane`, with a DeschedulerPolicy written to a file.

    run = run_descheduler(plane, policy_document, kubeconfig=plane.kubeconfig)
    run.evicted  # [(namespace, name), ...] as its log reports them

The binary: $DESCHEDULER, else $KUBE_BIN_DIR/descheduler, else the .xz beside the repository
(../shared/kube, read-only) unpacked once into the binaries' cache.
"""

from __future__ import annotations

import re
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kits.control_plane import ControlPlane
from kits.hollow_nodes import find_xz_binary

# klog's line for a successful eviction: `"Evicted pod" pod="ns/name" reason="..." ...`
_EVICTED = re.compile(r'"Evicted pod" pod="([^"/]+)/([^"]+)"')


def find_descheduler() -> Path:
    return find_xz_binary("descheduler")


@dataclass(frozen=True)
class DeschedulerRun:
    returncode: int
    log: str

    @property
    def evicted(self) -> list[tuple[str, str]]:
        return _EVICTED.findall(self.log)


def run_descheduler(
    plane: ControlPlane,
    policy: Mapping[str, Any],
    *,
    kubeconfig: Path | None = None,
    dry_run: bool = False,
    timeout: float = 60.0,
) -> DeschedulerRun:
    """One descheduling cycle with `policy`; its log is kept in the plane's logs folder."""
    folder = plane.workdir / "descheduler"
    folder.mkdir(parents=True, exist_ok=True)
    run_id = uuid.uuid4().hex[:6]
    policy_file = folder / f"policy-{run_id}.yaml"
    policy_file.write_text(yaml.safe_dump(dict(policy), sort_keys=False))
    command = [
        str(find_descheduler()),
        f"--kubeconfig={kubeconfig or plane.kubeconfig}",
        f"--policy-config-file={policy_file}",
        "--descheduling-interval=0",
        "--secure-port=0",  # no serving endpoint: runs may overlap with other processes' ports
        "--v=4",
    ]
    if dry_run:
        command.append("--dry-run")
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    log = done.stdout + done.stderr
    (plane.logs_dir / f"descheduler-{run_id}.log").write_text(log)
    return DeschedulerRun(done.returncode, log)
