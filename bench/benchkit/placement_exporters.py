"""What the placement bench's synthetic exporters write (`bench/placement.py --exporters`): the
releases a cluster runs, which the example policy reads unmodified (docs/exporters.md).

- `current`: dcgm-exporter 4.8.3 on (the node in `hostname`), Kepler >= 0.10;
- `older`: dcgm-exporter before 4.8.3 (`Hostname`, every 3.x and the GPU operator's bundles
  through mid-2026) and Kepler 0.7 (joule counters by `mode`, the node in `instance`).

Each is the keyword arguments of `kits.simulated_cluster.SimCluster` that pick them.
"""

from __future__ import annotations

from typing import Any

EXPORTERS: dict[str, dict[str, Any]] = {
    "current": {"dcgm_host_label": "hostname", "kepler_styles": ("0.10",)},
    "older": {"dcgm_host_label": "Hostname", "kepler_styles": ("0.7",)},
}
