"""The scoring cycle, read -> plan -> write. Its map:

- read: `sources/` (one reader per kind of data: PromQL, the Kubernetes API, a registry),
  `observe` (a reading per dimension mapped onto the nodes, and vetted);
- plan (pure): `plan/` (the labels, taints and pools each node should carry, from readings,
  nodes and memory), `retire` (keys left under a former label prefix), `clusterscore` (the
  cluster's own scores, OCM);
- write: `writer` (node writes, paced, merged, retried), `placementscore` (the cluster scores
  to the hub);
- run: `service` (one cycle end to end, and the refresh after pod events), `loop` (its
  schedule).
"""
