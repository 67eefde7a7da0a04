"""Fixtures for tests that talk to the API stand-in: a running server, seeded like the cluster
the golden bodies were captured on, and a `kubernetes` client pointed at it by kubeconfig.

The helpers import directly; the pytest fixtures `apistub` and `kube_client` are meant for
`pytest_plugins = ["tests.apistub_fixtures"]` in the top-level conftest.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from kits.apistub import ApiStub

# Bodies captured from a real kube-apiserver v1.36.2, copied into the repository.
API_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "api"


def load_api_fixture(name: str) -> Any:
    return json.loads((API_FIXTURES / name).read_text())


def fixture_workers() -> list[dict[str, Any]]:
    """worker-1..3 as captured: worker-1 from node-get.json, worker-2 from the limit=2 list,
    worker-3 (not in any captured list body) as worker-2 moved to zone-c."""
    worker1 = load_api_fixture("node-get.json")["body"]
    worker2 = copy.deepcopy(load_api_fixture("node-list-limit2.json")["body"]["items"][1])
    worker3 = json.loads(json.dumps(worker2).replace("worker-2", "worker-3"))
    worker3["metadata"]["labels"]["topology.kubernetes.io/zone"] = "zone-c"
    return [worker1, worker2, worker3]


def seed_fixture_workers(stub: ApiStub) -> None:
    for node in fixture_workers():
        stub.add_node(node)


def client_for(stub: ApiStub, kubeconfig: Path, ca_file: str | None = None) -> client.ApiClient:
    """A client configured only through a kubeconfig file, as the services are."""
    stub.kubeconfig(kubeconfig, ca_file=ca_file)
    return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.fixture
def apistub() -> Iterator[ApiStub]:
    stub = ApiStub.start()
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture
def kube_client(apistub: ApiStub, tmp_path: Path) -> Iterator[client.ApiClient]:
    api_client = client_for(apistub, tmp_path / "kubeconfig")
    try:
        yield api_client
    finally:
        api_client.close()
