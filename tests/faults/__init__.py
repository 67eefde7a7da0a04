"""Faults in what kube-steer stands on, on the real components (DESIGN decision 15).

Each module faults one thing (the apiserver, its watches, Prometheus, ...) under the real
`steer scorer run` and, where it matters, the webhook and the scheduler, on a real
kube-apiserver and a real Prometheus, and measures what the product does about it: time to
recover, writes during the fault, label, taint and pool flaps on nodes whose data did not
change (0), pods Failed or unsteered (0). Each module starts the components it faults, so a
fault never reaches another module. `make faults` runs this folder (CI: after `make e2e`).

- `test_prometheus_faults.py` (helpers in `prometheus_support.py`): Prometheus answering after
  8 s (beyond the policy's query timeout) and after 3 s (within it), one dimension answering
  with half its series, and no answer at all for longer than the TTL, through a fault proxy
  between the scorer and Prometheus. Its figures are repeated at the end of the run
  (`fault_summary`, conftest.py).
"""
