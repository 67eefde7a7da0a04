"""Test harness shared by the tests, the demo and the benchmark: a synthetic cluster exporter
(`kits.synthetic_exporter`) and the real Prometheus server started on loopback
(`kits.prometheus_server`). Not imported by the services themselves."""
