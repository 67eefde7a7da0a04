"""Test kits: what the tests, the demo and the benchmarks run beside the product, never the product.

- `kits.apistub`: the Kubernetes API stand-in (real HTTP, the apiserver's rules);
  `python -m kits.apistub` serves one.
- `kits.control_plane`: a real etcd + kube-apiserver + kube-scheduler on loopback;
  `kits.hollow_nodes`: kubemark kubelets registered with it.
- `kits.synthetic_exporter`: DCGM/Kepler/kube-state-metrics/blackbox series set by hand, and
  the exporter that serves them;
  `kits.simulated_cluster`: the same series derived from a live API.
- `kits.prometheus_server`: the real Prometheus server started on loopback.
- `kits.service_processes`: the scorer and the webhook run as an operator runs them.
- `kits.demo`: the no-cluster demo, the whole loop (`python -m kits.demo`, `make demo`).
- `kits.waiting`: the one polling wait (`wait_until`); `kits.net`: free loopback ports.

The wheel and the image ship `steer`, `scorer`, `webhook` and `certs` only; an import-linter
contract in pyproject.toml keeps those from importing this package.
"""
