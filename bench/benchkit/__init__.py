"""What the benchmark scripts in bench/ share, one module a job.

The scripts run as files (`python bench/scale_scorer.py`) and put the checkout first on
`sys.path`, so this package is `bench.benchkit` to them. The modules:

- `api`: a raw JSON client of the kube-apiserver (bulk requests, retries, watches, /metrics);
- `plane`: the test kit's control plane with etcd sized for 100,000 pods;
- `nodes`, `pods`: fake Nodes (a busy cluster's, or bare ones) and bound pods;
- `backfill`: a Prometheus backfilled with a synthetic cluster's series;
- `node_watch`, `procstat`, `scorer_process`, `metrics_text`: what the scorer bench observes;
- `publication`, `bursts`: the scorer bench's phases;
- `scorer_summary`, `scorer_report`: its results document and its tables;
- `recorded_scorer`: the product's scorer on recorded readings (what the scheduler bench's
  nodes carry);
- `shapes`, `realistic`, `scheduler_profiles`, `bind_watch`, `scheduler_metrics`,
  `scheduler_report`: the scheduler bench's pod shapes, their realistic pods (a Deployment's,
  with its ReplicaSet and Service), the profiles file it starts the scheduler with, its watch
  of binds, the scheduler's /metrics and its scoreboard;
- `placement_scenario`, `placement_measure`, `placement_report`: the placement bench's
  cluster and pod trace, what a run measures, and its scoreboard;
- `progress`, `provenance`, `stats`, `results`: logging and the thread pool, the commit and
  machine load a result was measured on, order statistics, the results file and work folder.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout
