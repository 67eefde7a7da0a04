"""The scorer: Prometheus data in, quantised node labels and taints out, explained on request.

Pure modules (`model`, `observe`, `plan`, `explain`) turn samples and node objects into a
plan; I/O lives in `writer` (Kubernetes API), `leader` (Lease election), `service` (one
cycle end to end), `loop` (APScheduler), `app` (HTTP) and `cli`.
"""
