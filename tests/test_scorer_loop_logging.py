"""What the scorer's schedule logs and how it talks to the apiserver at scale."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import scorer.cycle.loop  # noqa: F401  (installs the filter)
from steer.adapters.kube import make_api_client


def _skip(job: str) -> str:
    return (
        f'Execution of job "ScorerLoop.{job} (trigger: interval[0:00:02], next run at: '
        '2026-12-01 13:14:34 UTC)" skipped: maximum number of running instances reached (1)'
    )


def test_skipped_hot_refresh_is_not_a_warning_but_a_skipped_cycle_is(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("apscheduler.scheduler")
    with caplog.at_level(logging.WARNING, logger="apscheduler"):
        log.warning(_skip("hot_tick"))
        log.warning(_skip("tick"))
    assert [r.getMessage() for r in caplog.records] == [_skip("tick")]


def test_api_client_pools_enough_connections_for_the_writer(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:6443'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    api = make_api_client(str(kubeconfig))
    # 2 writer pools of 8 threads, the pod and node watches and a list must not overflow it.
    assert api.configuration.connection_pool_maxsize >= 32
    assert api.rest_client.pool_manager.connection_pool_kw["maxsize"] >= 32
