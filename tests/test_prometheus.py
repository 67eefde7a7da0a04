"""The Prometheus adapter against the real Prometheus server scraping the synthetic exporter."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from certs.pki import issue_cert, new_ca
from kits.prometheus_server import WARNING_PROBE_LABEL, PrometheusServer, scraped_cluster
from kits.synthetic_exporter import SyntheticCluster, SyntheticExporter
from steer.adapters.prometheus import (
    PrometheusAuthError,
    PrometheusClient,
    PrometheusQueryError,
    PrometheusResponseError,
    PrometheusUnavailable,
)

GPU_UTIL = {"node-1": (10, 30), "node-2": (50, 50), "node-3": (90, 70)}


@pytest.fixture(scope="module")
def cluster() -> SyntheticCluster:
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2, seed=7)
    for node, utils in GPU_UTIL.items():
        for gpu, util in enumerate(utils):
            cluster.set_gpu_util(node, util, gpu=gpu)
    cluster.add_container(
        "node-1", "team-a", "train-0", requests={"cpu": 2, "memory": 2**30}, limits={"cpu": 4}
    )
    return cluster


@pytest.fixture(scope="module")
def scraped(cluster: SyntheticCluster) -> Iterator[tuple[SyntheticExporter, PrometheusServer]]:
    with scraped_cluster(cluster, warning_probe=True) as running:
        yield running


@pytest.fixture(scope="module")
def exporter(scraped: tuple[SyntheticExporter, PrometheusServer]) -> SyntheticExporter:
    return scraped[0]


@pytest.fixture(scope="module")
def prom(scraped: tuple[SyntheticExporter, PrometheusServer]) -> PrometheusServer:
    return scraped[1]


@pytest.fixture()
def client(prom: PrometheusServer) -> Iterator[PrometheusClient]:
    with prom.client(timeout_s=5) as client:
        yield client


def test_dcgm_aggregation_returns_one_sample_per_node(client: PrometheusClient) -> None:
    result = client.query("avg by (hostname) (DCGM_FI_DEV_GPU_UTIL)")

    assert result.values_by("hostname") == {"node-1": 20.0, "node-2": 50.0, "node-3": 80.0}
    assert all(dict(s.labels).keys() == {"hostname"} for s in result.samples)
    assert result.warnings == ()
    assert result.evaluated_at > 1.6e9  # the server's evaluation time, unix seconds


def test_exporter_labels_survive_the_scrape(client: PrometheusClient) -> None:
    # honor_labels: the blackbox exporter names the node in `instance` and its own `job`,
    # which Prometheus would otherwise overwrite with the exporter's address and scrape job.
    probes = client.query("probe_success")
    assert {(s.labels["instance"], s.labels["job"]) for s in probes.samples} == {
        ("node-1", "node-health"),
        ("node-2", "node-health"),
        ("node-3", "node-health"),
    }
    kepler = client.query("sum by (node_name) (kepler_node_cpu_joules_total)")
    assert set(kepler.values_by("node_name")) == {"node-1", "node-2", "node-3"}

    gpus = client.query('kube_node_status_allocatable{resource="nvidia_com_gpu",unit="integer"}')
    assert gpus.values_by("node") == {"node-1": 2.0, "node-2": 2.0, "node-3": 2.0}
    limits = client.query('kube_pod_container_resource_limits{namespace="team-a",resource="cpu"}')
    assert [(s.labels["pod"], s.labels["node"], s.value) for s in limits.samples] == [
        ("train-0", "node-1", 4.0)
    ]


def test_state_changes_reach_prometheus_on_the_next_scrape(
    prom: PrometheusServer, cluster: SyntheticCluster
) -> None:
    cluster.set_gpu_memory("node-2", 40000)
    prom.wait_for(
        "max by (hostname) (DCGM_FI_DEV_FB_USED)",
        lambda r: r.values_by("hostname").get("node-2") == 40000,
    )

    cluster.hide("node-3", "DCGM_FI_DEV_FB_FREE")
    gone = prom.wait_for(
        "count by (hostname) (DCGM_FI_DEV_FB_FREE)",
        lambda r: "node-3" not in r.values_by("hostname"),
    )
    assert set(gone.values_by("hostname")) == {"node-1", "node-2"}  # staleness, no 5 min lag


def test_nan_and_infinities_become_floats(client: PrometheusClient) -> None:
    assert math.isnan(client.query("0/0").samples[0].value)
    assert client.query("1/0").samples[0].value == math.inf
    negative = client.query("vector(-1/0)").samples
    assert len(negative) == 1 and negative[0].value == -math.inf
    assert dict(negative[0].labels) == {}


def test_time_parameter_sets_the_evaluation_time(client: PrometheusClient) -> None:
    at = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    result = client.query("time()", time=at)
    assert result.samples[0].value == at.timestamp()
    assert result.evaluated_at == at.timestamp()


def test_get_and_post_give_the_same_answer(prom: PrometheusServer) -> None:
    query = "count by (hostname) (DCGM_FI_DEV_GPU_UTIL)"
    with prom.client(method="GET") as get, prom.client(method="POST") as post:
        assert get.query(query).values_by("hostname") == post.query(query).values_by("hostname")


def test_syntax_error_names_query_and_error(client: PrometheusClient) -> None:
    with pytest.raises(PrometheusQueryError) as info:
        client.query("sum(DCGM_FI_DEV_GPU_UTIL")

    assert info.value.error_type == "bad_data"
    assert info.value.query == "sum(DCGM_FI_DEV_GPU_UTIL"
    assert "'sum(DCGM_FI_DEV_GPU_UTIL'" in str(info.value)
    assert "unclosed left parenthesis" in str(info.value)


def test_execution_error_is_a_query_error(client: PrometheusClient) -> None:
    # Two GPUs per hostname on each side: a one-to-one match is impossible (HTTP 422).
    with pytest.raises(PrometheusQueryError) as info:
        client.query("DCGM_FI_DEV_GPU_UTIL * on (hostname) DCGM_FI_DEV_FB_USED")
    assert info.value.error_type == "execution"
    assert "many-to-many matching not allowed" in str(info.value)


def test_range_vector_result_is_refused(client: PrometheusClient) -> None:
    with pytest.raises(PrometheusResponseError, match="returned a matrix"):
        client.query("DCGM_FI_DEV_GPU_UTIL[1m]")


def test_duplicate_label_values_need_an_aggregation(client: PrometheusClient) -> None:
    result = client.query("DCGM_FI_DEV_GPU_UTIL")
    with pytest.raises(PrometheusResponseError, match=r"max by \(hostname\)"):
        result.values_by("hostname")


def test_server_side_timeout_is_sent_and_reported(prom: PrometheusServer) -> None:
    client = prom.client(timeout_s=5, server_timeout_s=1e-6)
    with client, pytest.raises(PrometheusUnavailable) as info:
        client.query("count_over_time(DCGM_FI_DEV_GPU_UTIL[1h])")
    assert info.value.error_type == "timeout"
    assert "server-side timeout" in str(info.value)


def test_real_server_warnings_are_surfaced(client: PrometheusClient) -> None:
    # The harness' remote-read endpoint refuses connections; Prometheus answers with a warning.
    result = client.query(f'DCGM_FI_DEV_GPU_UTIL{{{WARNING_PROBE_LABEL}="1"}}')
    assert result.samples == ()
    assert len(result.warnings) == 1
    assert "remote_read" in result.warnings[0]


def test_exporter_url_instead_of_prometheus_is_a_response_error(
    exporter: SyntheticExporter,
) -> None:
    client = PrometheusClient(f"http://{exporter.target}", timeout_s=5)
    with client, pytest.raises(PrometheusResponseError, match="non-JSON"):
        client.query("up")


def test_wrong_path_prefix_hints_at_the_base_url(prom: PrometheusServer) -> None:
    client = PrometheusClient(prom.url + "/prometheus", timeout_s=5)
    with client, pytest.raises(PrometheusResponseError, match="base URL"):
        client.query("up")


def test_stopped_server_is_unavailable() -> None:
    server = PrometheusServer().start()
    client = server.client(timeout_s=2)
    assert client.query("vector(1)").samples[0].value == 1.0
    server.stop()

    with pytest.raises(PrometheusUnavailable) as info:
        client.query("vector(1)")
    assert server.url in str(info.value) and "'vector(1)'" in str(info.value)


def test_client_timeout_on_a_hung_peer_is_unavailable() -> None:
    # A socket that completes the TCP handshake (kernel backlog) but never answers.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        client = PrometheusClient(url, timeout_s=0.3)
        with client, pytest.raises(PrometheusUnavailable, match=r"within 0\.3s"):
            client.query("up")


def test_backfilled_history_is_queryable_at_its_timestamps() -> None:
    start = 1_700_000_000.0
    cluster = SyntheticCluster(nodes=4, gpus_per_node=2, seed=1)
    cluster.set_gpu_util("node-2", 70)
    cluster.set_power("node-3", package_watts=450)
    text = io.StringIO()
    cluster.write_openmetrics(text, [start + 15 * i for i in range(20)])  # 285 s of history

    server = PrometheusServer()
    server.backfill(text.getvalue())
    with server, server.client(timeout_s=5) as client:
        util = client.query("avg by (hostname) (DCGM_FI_DEV_GPU_UTIL)", time=start + 100)
        assert util.values_by("hostname") == {
            "node-1": 0.0,
            "node-2": 70.0,
            "node-3": 0.0,
            "node-4": 0.0,
        }
        watts = client.query(
            "sum by (node_name) (rate(kepler_node_cpu_joules_total[1m]))", time=start + 200
        ).values_by("node_name")
        # The CPU counter over both zones: 450 W set, 120 W the default.
        assert watts["node-3"] == pytest.approx(450) and watts["node-1"] == pytest.approx(120)
        # Before the first sample, and past the 5 min lookback after the last one: nothing.
        assert client.query("DCGM_FI_DEV_GPU_UTIL", time=start - 1).samples == ()
        assert client.query("DCGM_FI_DEV_GPU_UTIL", time=start + 285 + 301).samples == ()


def test_backfill_rejects_malformed_openmetrics() -> None:
    server = PrometheusServer()
    try:
        with pytest.raises(RuntimeError, match="promtool tsdb create-blocks-from openmetrics"):
            server.backfill("this is not openmetrics\n")
    finally:
        server.stop()


# bcrypt (cost 4) of "scorer-secret", as Prometheus' web config requires.
SCORER_HASH = "$2b$04$JPLoom7GsV2gllbeM4qGHupbUUi8rEE8Tfb.uD6n1BgYF6zecyuRu"


def _tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A CA and a server certificate for 127.0.0.1 signed by it."""
    ca = new_ca(days=1)
    served = issue_cert(ca, "prometheus", ips=["127.0.0.1"], days=1)
    ca_file, cert_file, key_file = (
        directory / "ca.pem",
        directory / "tls.crt",
        directory / "tls.key",
    )
    ca_file.write_bytes(ca.cert_pem)
    cert_file.write_bytes(served.cert_pem)
    key_file.write_bytes(served.key_pem)
    return ca_file, cert_file, key_file


def test_tls_with_ca_file_and_basic_auth(tmp_path: Path) -> None:
    ca_file, cert_file, key_file = _tls_files(tmp_path)
    web_config = {
        "tls_server_config": {"cert_file": str(cert_file), "key_file": str(key_file)},
        "basic_auth_users": {"scorer": SCORER_HASH},
    }
    with PrometheusServer(web_config=web_config) as server:
        assert server.url.startswith("https://127.0.0.1:")
        # ca_file wins over REQUESTS_CA_BUNDLE, which does not hold this CA.
        with PrometheusClient(
            server.url, ca_file=str(ca_file), basic_auth=("scorer", "scorer-secret")
        ) as client:
            assert client.query("vector(1)").samples[0].value == 1.0

        with (
            PrometheusClient(
                server.url, ca_file=str(ca_file), basic_auth=("scorer", "wrong")
            ) as client,
            pytest.raises(PrometheusAuthError, match="401"),
        ):
            client.query("vector(1)")

        client = PrometheusClient(server.url, basic_auth=("scorer", "scorer-secret"))
        with client, pytest.raises(PrometheusUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            client.query("vector(1)")


class _NewerPrometheusHandler(BaseHTTPRequestHandler):
    """Stand-in for the one answer shape Prometheus 2.42 cannot produce: `infos` (>= 2.52)."""

    def do_POST(self) -> None:
        body = {
            "status": "success",
            "data": {
                "resultType": "vector",
                "result": [{"metric": {"node": "n1"}, "value": [1.5, "+Inf"]}],
            },
            "warnings": ["PromQL warning: encountered a mix of histograms and floats"],
            "infos": [
                'PromQL info: metric might not be a counter, name does not end in _total: "x"'
            ],
        }
        payload = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_infos_and_warnings_of_newer_servers_are_parsed() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NewerPrometheusHandler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        with PrometheusClient(f"http://127.0.0.1:{server.server_port}", timeout_s=5) as client:
            result = client.query("rate(x[5m])")
        assert result.infos == (
            'PromQL info: metric might not be a counter, name does not end in _total: "x"',
        )
        assert result.warnings == ("PromQL warning: encountered a mix of histograms and floats",)
        assert result.values_by("node") == {"n1": math.inf}
        assert result.evaluated_at == 1.5
    finally:
        server.shutdown()
        server.server_close()


def test_noise_is_seeded_and_bounded() -> None:
    def utils(seed: int) -> list[float]:
        cluster = SyntheticCluster(nodes=2, gpus_per_node=4, seed=seed, noise_pct=10)
        for node in cluster.node_names:
            cluster.set_gpu_util(node, 95)
        families = {f.name: f for f in cluster.families(now=1.0)}
        return [value for _, value in families["DCGM_FI_DEV_GPU_UTIL"].samples]

    assert utils(1) == utils(1) != utils(2)
    assert all(85 <= u <= 100 for u in utils(1))
