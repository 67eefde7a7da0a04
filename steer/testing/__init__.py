"""Test harness shared by the tests, the demo and the benchmark: a synthetic cluster exporter
(`steer.testing.exporter`) and the real Prometheus server started on loopback
(`steer.testing.prom`). Not imported by the services themselves."""
