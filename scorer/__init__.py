"""The scorer: readings in (Prometheus, the Kubernetes API, registries), quantised node labels,
taints and budget pools out, explained on request. Its map, by job:

- the cycle, read -> plan -> write: `sources/` (one reader per kind of data), `observe` (a
  reading per dimension, vetted), `plan/` (pure: the cycle plan from readings, nodes and
  memory), `retire` (keys of a former prefix), `clusterscore` and `placementscore` (the
  cluster's own scores, OCM), `writer` (node writes, paced, merged), `service` (one cycle end
  to end), `loop` (its schedule);
- the watches that keep the cycle's inputs in memory: `nodes`, `bindings`, `ledger` (the pods
  that hold budget pools), `pending` (steered pods kept Pending, and their Events);
- the leader's jobs: `leader` (the Lease), `policy_status` (the SteeringPolicy's status);
- what it serves: `app` (HTTP), `access/` (who may read what), `explain/` (pure: the views of
  nodes, pods and the audit), `page/` (the explain page), `metrics`;
- entry points: `serve` (`steer scorer run`), `cli` (its flags, `once`, `cleanup`, `steer
  policy check`), `check` (what `steer policy check` finds), `cleanup`, `kubeapi` (paths).

The command-line clients of a running scorer and their printers are launcher's
(`launcher.explain`, `launcher.scorer_client`, `launcher.page_relay`); the example policy and
its preset variants are `steer.presets`. Admission policies and certificates are the
controller's (`controller/`).
"""
