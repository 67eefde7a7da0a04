"""The explain page in headless Chromium, against the real thing: `steer scorer run` under its
manifest's ClusterRole, the webhook (`steer webhook serve`, registered with the apiserver),
kube-apiserver and kube-scheduler v1.36.2 and a real Prometheus scraping a synthetic exporter.

Three nodes; the third one's GPUs run hot, so the scorer taints it `gpu-hot` (NoSchedule) and
closes its `avoid-gpu-hot` gate. A dept-b GPU pod that may only go there waits. The page must
list every node of the cluster, and for that pod show the scheduler's own verdict (its
`FailedScheduling` message) beside kube-steer's rule that keeps it off the node. The what-if
form explains a pasted YAML pod. Screenshots of both views are saved under
tests/e2e/artifacts/ (git-ignored; printed).

Chromium and chromedriver come from Debian (`chromium`, `chromium-driver`; .ci/run installs
them); Selenium drives them by path, so it never looks for or downloads a browser.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from kits.control_plane import ROOT, ControlPlane
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.service_processes import (
    RunningWebhook,
    register_admission,
    running_scorer,
    running_webhook,
    unregister_admission,
)
from kits.synthetic_exporter import SyntheticCluster
from kits.waiting import wait_until
from scorer.jobs.pending import EVENT_REASON
from steer.adapters.kubejson import KubeApiError, KubeJson, events_path, node_path, pod_path
from steer.core.policy import parse_policy
from steer.core.steering import trace_annotation_key
from tests.e2e.waiting import NOT_YET
from tests.scorer_support import SMALL_POLICY

NODES = ("page-e2e-1", "page-e2e-2", "page-e2e-3")
N1, N2, N3 = NODES
SET_KEY = "e2e.kube-steer.github.io/page-set"
# SMALL_POLICY, scoring every second, with budget pools the scheduler enforces.
POLICY_TEXT = SMALL_POLICY.replace("intervalSeconds: 30}", "intervalSeconds: 1}") + (
    "  overcommit: {enforcement: scheduler}\n"
)
POLICY = parse_policy(POLICY_TEXT)
AUDIT_TEXT = POLICY_TEXT.replace("spec:\n", "spec:\n  mode: audit\n", 1)
HOT_TAINT = "taint kube-steer.github.io/gpu-hot=true:NoSchedule"
OPT_IN = {"kube-steer.github.io/enabled": "true"}
ARTIFACTS = Path(os.environ.get("STEER_E2E_ARTIFACTS", ROOT / "tests" / "e2e" / "artifacts"))
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


@pytest.fixture(scope="module")
def scraped() -> Iterator[PrometheusServer]:
    """GPU utilisation 20, 50 and 95 %: the third node runs hot."""
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2, node_prefix="page-e2e-")
    for name, util, watts in zip(NODES, (20, 50, 95), (300, 400, 500), strict=True):
        cluster.set_gpu_util(name, util)
        cluster.set_power(name, package_watts=watts)
    with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
        yield prom


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            pytest.fail(f"{path} not found: install the Debian package {package} (.ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-proxy-server",  # the scorer is on loopback
        "--window-size=1280,800",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    # A 1280x800 viewport, exactly: the size the page is laid out for.
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False},
    )
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def webhook(control_plane: ControlPlane, tmp_path: Path) -> Iterator[RunningWebhook]:
    policy_file = tmp_path / "webhook-policy.yaml"
    policy_file.write_text(POLICY_TEXT)
    with running_webhook(control_plane, policy_file, tmp_path / "webhook") as hook:
        register_admission(control_plane, hook)
        try:
            yield hook
        finally:
            unregister_admission(control_plane)


def steered(admin: KubeJson, namespace: str) -> bool:
    """A dry-run pod in `namespace` comes back with the webhook's trace."""
    probe = {"metadata": {"name": f"probe-{uuid.uuid4().hex[:6]}"}, "spec": gpu_spec()}
    created = admin.request(
        "POST", f"/api/v1/namespaces/{namespace}/pods", query={"dryRun": "All"}, body=probe
    )
    return trace_annotation_key(POLICY) in (created["metadata"].get("annotations") or {})


def gpu_spec(**extra: Any) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "cpu": "100m", "memory": "64Mi"}
    return {
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}
        ],
        **extra,
    }


def event_message(admin: KubeJson, namespace: str, name: str, reason: str) -> str | None:
    events = admin.request(
        "GET",
        events_path(namespace),
        query={"fieldSelector": f"involvedObject.name={name},reason={reason}"},
    )["items"]
    return str(events[-1]["message"]) if events else None


def failed_scheduling(admin: KubeJson, namespace: str, name: str) -> str | None:
    return event_message(admin, namespace, name, "FailedScheduling")


def wait_for(
    driver: WebDriver, what: str, found: Callable[[WebDriver], Any], timeout: float = 20
) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(found, message=what)


def screenshot(driver: WebDriver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    assert driver.save_screenshot(str(path)), path
    print(f"screenshot: {path}")
    return path


def test_the_page_shows_every_node_and_why_a_tenant_pod_waits(
    scraped: PrometheusServer,
    control_plane: ControlPlane,
    make_node: Callable[..., dict[str, Any]],
    make_namespace: Callable[..., str],
    admin: KubeJson,
    scorer_user: Path,
    webhook: RunningWebhook,
    browser: WebDriver,
    tmp_path: Path,
) -> None:
    for name in NODES:
        make_node(name, cpu="16", memory="64Gi", gpus=2, labels={SET_KEY: "1"})
    namespace = make_namespace({"tenant": "dept-b", **OPT_IN}, prefix="page-dept-b")
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(POLICY_TEXT)
    with running_scorer(
        control_plane,
        policy_file,
        scraped.url,
        tmp_path,
        name="scorer-page",
        # argparse keeps the last --kubeconfig: the user of the manifest's ClusterRole
        extra_args=["--kubeconfig", str(scorer_user), "--no-leader-election"],
    ) as scorer:
        scorer.wait_ready()
        wait_until(
            "the scorer taints the hot node",
            lambda: (
                "kube-steer.github.io/gpu-hot"
                in {t["key"] for t in admin.request("GET", node_path(N3))["spec"].get("taints", [])}
            ),
            timeout=30,
            ignoring=NOT_YET,
        )
        wait_until(
            "the webhook steers the namespace", lambda: steered(admin, namespace), timeout=20
        )
        # A dept-b GPU job that may only run on the hot node: the scheduler cannot place it.
        pinned = gpu_spec(nodeSelector={"kubernetes.io/hostname": N3})
        admin.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods",
            body={"metadata": {"name": "train"}, "spec": pinned},
        )
        message = wait_until(
            "the scheduler reports FailedScheduling",
            lambda: failed_scheduling(admin, namespace, "train"),
            timeout=30,
            ignoring=NOT_YET,
        )
        # v1.36 names no taint key: "1 node(s) had untolerated taint(s)".
        assert "untolerated taint" in message, message
        live = admin.request("GET", pod_path(namespace, "train"))
        assert not live["spec"].get("nodeName")
        # The scorer's own Event says which of its rules keeps the pod off the hot node.
        blocked = wait_until(
            "the scorer's BlockedBySteering Event",
            lambda: event_message(admin, namespace, "train", EVENT_REASON),
            timeout=30,
            ignoring=NOT_YET,
        )
        assert f"{N3}: " in blocked and "avoid:gpu-hot" in blocked, blocked

        # -- nodes view: every node of the cluster, with its scores, taints and pools
        browser.get(f"{scorer.url}/")
        every = {n["metadata"]["name"] for n in admin.request("GET", node_path())["items"]}
        assert set(NODES) <= every
        wait_for(
            browser,
            "a row per node",
            lambda d: len(d.find_elements(By.CSS_SELECTOR, "#nodes-table tbody tr")) == len(every),
        )
        rows = browser.find_elements(By.CSS_SELECTOR, "#nodes-table tbody tr")
        assert {r.get_attribute("data-node") for r in rows} == every
        headers = [
            h.text.split("\n")[0] for h in browser.find_elements(By.CSS_SELECTOR, "#nodes-table th")
        ]
        assert headers[:4] == ["node", "util", "power", "overcommit-pct"], headers
        hot = browser.find_element(By.CSS_SELECTOR, f'#nodes-table tr[data-node="{N3}"]')
        assert "gpu-hot" in hot.text and "pool-cpu" in hot.text, hot.text
        util = hot.find_elements(By.CSS_SELECTOR, "td.score")[0]
        assert "95 pct" in util.text and util.value_of_css_property("background-color") != (
            "rgba(0, 0, 0, 0)"
        )
        # Sorting by util, best first: the idle node leads, the hot one trails.
        browser.find_element(By.CSS_SELECTOR, 'th[data-key="dim:util"]').click()
        order = [
            r.get_attribute("data-node")
            for r in browser.find_elements(By.CSS_SELECTOR, "#nodes-table tbody tr")
        ]
        assert [n for n in order if n in NODES] == [N1, N2, N3], order
        screenshot(browser, "page-nodes.png")
        box = browser.find_element(By.ID, "filter")
        box.send_keys(N2)
        wait_for(
            browser,
            "the filter leaves one node",
            lambda d: d.find_element(By.ID, "node-count").text.startswith("1 of"),
        )
        box.clear()

        # -- the live pod: the scheduler's verdict beside kube-steer's exclusions
        browser.get(f"{scorer.url}/#pod/{namespace}/train")
        shown = wait_for(
            browser,
            "the FailedScheduling message",
            lambda d: d.find_elements(By.CSS_SELECTOR, "#pod-result .failed-scheduling-message"),
        )
        assert shown[0].text == message
        verdict = browser.find_element(By.CSS_SELECTOR, "#pod-result .verdict").text
        assert verdict.startswith("Waiting: Unschedulable"), verdict
        condition = browser.find_element(By.CSS_SELECTOR, "#pod-result .pod-scheduled-message")
        assert "untolerated taint" in condition.text, condition.text
        exclusions = browser.find_elements(
            By.CSS_SELECTOR, f'#pod-result tr.exclusion[data-node="{N3}"]'
        )
        by_rule = {e.get_attribute("data-rule"): e.text for e in exclusions}
        assert HOT_TAINT in by_rule, by_rule
        # The rule with the value behind it: the condition and what was observed.
        assert "util (raw) Gt 90, observed 95" in by_rule[HOT_TAINT], by_rule[HOT_TAINT]
        rules = browser.find_element(By.CSS_SELECTOR, "#pod-result .rules").text
        assert "avoid:gpu-hot" in rules or "class:gpu" in rules, rules
        for other in (N1, N2):  # the pod's own nodeSelector keeps it off the others
            assert browser.find_elements(
                By.CSS_SELECTOR, f'#pod-result tr.exclusion[data-node="{other}"]'
            )
        path = screenshot(browser, "page-pod.png")
        assert path.stat().st_size > 10_000

        # -- what-if: a pasted YAML pod, ranked and excluded
        browser.get(f"{scorer.url}/#whatif")
        text = yaml.safe_dump({"metadata": {"name": "try"}, "spec": gpu_spec()})
        area = browser.find_element(By.ID, "whatif-pod")
        browser.execute_script("arguments[0].value = arguments[1]", area, text)
        browser.find_element(By.ID, "whatif-namespace").send_keys(namespace)
        browser.find_element(By.CSS_SELECTOR, "#whatif-form button[type=submit]").click()
        wait_for(
            browser,
            "ranked nodes",
            lambda d: d.find_elements(By.CSS_SELECTOR, "#whatif-result table.allowed tbody tr"),
        )
        ranked = [
            r.get_attribute("data-node")
            for r in browser.find_elements(By.CSS_SELECTOR, "#whatif-result table.allowed tbody tr")
        ]
        assert N3 not in ranked and {N1, N2} <= set(ranked), ranked
        assert browser.find_elements(
            By.CSS_SELECTOR, f'#whatif-result tr.exclusion[data-node="{N3}"]'
        )
        screenshot(browser, "page-whatif.png")
        assert not browser.find_element(By.ID, "error").is_displayed()
        with contextlib.suppress(KubeApiError):
            admin.request("DELETE", pod_path(namespace, "train"))


def test_the_audit_tab_says_what_enforce_mode_would_have_refused(
    scraped: PrometheusServer,
    control_plane: ControlPlane,
    make_node: Callable[..., dict[str, Any]],
    make_namespace: Callable[..., str],
    admin: KubeJson,
    scorer_user: Path,
    browser: WebDriver,
    tmp_path: Path,
) -> None:
    """The same cluster and pod in audit mode: no taint, so the pod binds on the hot node, and
    the page's Audit tab says enforce mode would have kept it off by `avoid:gpu-hot`."""
    for name in NODES:
        make_node(name, cpu="16", memory="64Gi", gpus=2, labels={SET_KEY: "1"})
    namespace = make_namespace({"tenant": "dept-b", **OPT_IN}, prefix="page-audit")
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(AUDIT_TEXT)
    with (
        running_webhook(control_plane, policy_file, tmp_path / "webhook") as hook,
        running_scorer(
            control_plane,
            policy_file,
            scraped.url,
            tmp_path,
            name="scorer-page-audit",
            extra_args=["--kubeconfig", str(scorer_user), "--no-leader-election"],
        ) as scorer,
    ):
        register_admission(control_plane, hook)
        try:
            scorer.wait_ready()
            # Audit mode labels the hot node's condition and closes its gate, but taints nothing.
            wait_until(
                "the scorer labels the hot node's condition",
                lambda: (
                    admin.request("GET", node_path(N3))["metadata"]["labels"].get(
                        "kube-steer.github.io/gpu-hot"
                    )
                    == "true"
                ),
                timeout=30,
                ignoring=NOT_YET,
            )
            wait_until(
                "the webhook traces the namespace",
                lambda: steered(admin, namespace),
                timeout=20,
            )
            pinned = gpu_spec(nodeSelector={"kubernetes.io/hostname": N3})
            admin.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/pods",
                body={"metadata": {"name": "train"}, "spec": pinned},
            )
            wait_until(
                "the audited pod binds on the hot node",
                lambda: (
                    admin.request("GET", pod_path(namespace, "train"))["spec"].get("nodeName") == N3
                ),
                timeout=30,
            )
            assert not admin.request("GET", node_path(N3))["spec"].get("taints")

            browser.get(f"{scorer.url}/#audit")
            row = wait_for(
                browser,
                "the audited pod in the report",
                lambda d: d.find_elements(
                    By.CSS_SELECTOR, f'#audit-result tr[data-pod="{namespace}/train"]'
                ),
            )[0]
            assert N3 in row.text and "avoid:gpu-hot" in row.text, row.text
            rules = browser.find_element(By.CSS_SELECTOR, "#audit-result table.audit-rules")
            assert "avoid:gpu-hot" in rules.text, rules.text
            screenshot(browser, "page-audit.png")
            assert not browser.find_element(By.ID, "error").is_displayed()
        finally:
            unregister_admission(control_plane)
            with contextlib.suppress(KubeApiError):
                admin.request("DELETE", pod_path(namespace, "train"))
