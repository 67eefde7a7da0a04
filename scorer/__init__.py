"""The scorer: readings in (Prometheus, the Kubernetes API, registries), quantised node labels,
taints and budget pools out, explained on request. Its map, by job:

- `cycle/`: the scoring cycle, read -> plan -> write (sources, the vetted readings, the pure
  plan, the node writer, the service that runs one cycle, its schedule);
- `watch/`: the watches that keep the cycle's inputs in memory (nodes, bindings, the ledger of
  the pods that hold budget pools);
- `jobs/`: the leader's jobs beside the cycle (the SteeringPolicy's status, the Events on steered
  pods a rule keeps Pending);
- what it serves: `app` (HTTP), `access/` (who may read what), `explain/` (pure: the views of
  nodes, pods and the audit), `page/` (the explain page), `metrics`;
- entry points: `serve` (`steer scorer run`), `cli` (its flags, `once`, `cleanup`, `steer
  policy check`), `check` (what `steer policy check` finds), `cleanup`; and what every room
  shares: `model` (a node as read).

The Lease election is `steer.adapters.lease` (the controller's too). The command-line clients
of a running scorer and their printers are launcher's (`launcher.explain`,
`launcher.scorer_client`, `launcher.page_relay`); the example policy and its preset variants are
`steer.presets`. Admission policies and certificates are the controller's (`controller/`).
"""
