"""Hot reload: ConfigMap-style symlink swaps are seen, bad edits keep the last good policy."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from steer.adapters.policy_file import MAX_POLICY_BYTES, PolicyWatcher, load_policy_file
from steer.core.policy import Policy, PolicyError
from tests.conftest import EXAMPLE_POLICY


def _configmap_volume(tmp_path: Path, content: str) -> Path:
    """Lay out a directory the way the kubelet mounts a ConfigMap: policy.yaml -> ..data/policy.yaml."""
    return _swap(tmp_path, content, 1)


def _swap(root: Path, content: str, generation: int) -> Path:
    target = root / f"..2026_11_30_{generation}"
    target.mkdir()
    (target / "policy.yaml").write_text(content)
    tmp_link = root / "..data_tmp"
    tmp_link.symlink_to(target.name)
    os.replace(tmp_link, root / "..data")  # the kubelet's atomic swap
    link = root / "policy.yaml"
    if not link.is_symlink():
        link.symlink_to("..data/policy.yaml")
    return link


def test_reload_follows_symlink_swap_and_keeps_last_good(tmp_path: Path) -> None:
    good = EXAMPLE_POLICY.read_text()
    path = _configmap_volume(tmp_path, good)
    watcher = PolicyWatcher(str(path), interval_seconds=60)
    seen: list[Policy] = []
    watcher.subscribe(seen.append)
    first = watcher.current
    assert seen == [first]
    assert watcher.check() is False  # unchanged content: no reload, no listener call

    edited = good.replace("weight: 3", "weight: 7")
    _swap(tmp_path, edited, 2)
    assert watcher.check() is True
    assert watcher.current.version != first.version
    assert watcher.current.dimension("gpu-util").weight == 7
    assert len(seen) == 2

    _swap(tmp_path, edited.replace("overcommitPercent: 0", "overcommitPercent: 150"), 3)
    assert watcher.check() is False
    assert watcher.current.dimension("gpu-util").weight == 7  # last good keeps running
    status = watcher.status()
    assert status.reload_errors == 1
    assert (
        status.last_error is not None
        and "spec.tenants[1].overcommitPercent: must be between 0 and 100, got 150"
        in status.last_error
    )
    assert watcher.check() is False and watcher.status().reload_errors == 1  # counted once

    _swap(tmp_path, good, 4)
    assert watcher.check() is True
    assert watcher.current.version == first.version
    assert watcher.status().last_error is None


def test_missing_file_is_counted_and_policy_kept(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE_POLICY.read_text())
    watcher = PolicyWatcher(str(path))
    version = watcher.current.version
    path.unlink()
    assert watcher.check() is False
    assert watcher.current.version == version
    assert watcher.status().reload_errors == 1
    assert "cannot read policy file" in (watcher.status().last_error or "")


def test_reload_error_listeners_hear_each_rejected_content_once(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE_POLICY.read_text())
    watcher = PolicyWatcher(str(path))
    heard: list[str] = []
    watcher.on_reload_error(heard.append)
    watcher.on_reload_error(lambda _message: 1 / 0)  # a broken listener is logged, not raised
    path.write_text("spec: {dimensions: []}\n")
    assert watcher.check() is False and watcher.check() is False
    assert len(heard) == 1 and heard[0] == watcher.status().last_error
    path.write_text("spec: {tenants: 3}\n")
    assert watcher.check() is False
    assert len(heard) == 2 == watcher.status().reload_errors


def test_listener_failure_does_not_block_others(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE_POLICY.read_text())
    watcher = PolicyWatcher(str(path))
    calls: list[str] = []

    def broken(policy: Policy) -> None:
        raise RuntimeError("boom")

    watcher.subscribe(broken, call_now=False)
    watcher.subscribe(lambda p: calls.append(p.version), call_now=False)
    path.write_text(EXAMPLE_POLICY.read_text().replace("weight: 3", "weight: 4"))
    assert watcher.check() is True
    assert calls == [watcher.current.version]


def test_background_polling_picks_up_a_change(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE_POLICY.read_text())
    watcher = PolicyWatcher(str(path), interval_seconds=0.05)
    import threading

    changed = threading.Event()
    watcher.subscribe(lambda p: changed.set(), call_now=False)
    watcher.start()
    try:
        path.write_text(EXAMPLE_POLICY.read_text().replace("weight: 3", "weight: 5"))
        assert changed.wait(10)
        assert watcher.current.dimension("gpu-util").weight == 5
    finally:
        watcher.stop()


def test_invalid_initial_policy_refuses_to_start(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("apiVersion: kube-steer.github.io/v1alpha1\nkind: SteeringPolicy\nspec: {}\n")
    with pytest.raises(PolicyError, match=r"spec.dimensions: required field is missing"):
        PolicyWatcher(str(path))
    with pytest.raises(PolicyError, match="cannot read policy file"):
        load_policy_file(str(tmp_path / "absent.yaml"))


def test_a_file_nested_thousands_deep_is_refused_and_the_next_edit_served(tmp_path: Path) -> None:
    """A pathological edit once killed the reload thread (RecursionError): it is a rejected
    policy like any other, counted once, and the next valid edit is served."""
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE_POLICY.read_text())
    watcher = PolicyWatcher(str(path), interval_seconds=0.05)
    first = watcher.current.version
    path.write_text("spec: " + "[" * 5000 + "]" * 5000 + "\n")
    assert watcher.check() is False
    assert watcher.reload_errors == 1 and "nested too deeply" in (watcher.last_error or "")
    path.write_text(EXAMPLE_POLICY.read_text().replace("step: 10 ", "step: 20 "))
    assert watcher.check() is True and watcher.current.version != first
    assert watcher.last_error is None


def test_a_deleted_then_restored_policy_clears_the_error(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    text = EXAMPLE_POLICY.read_text()
    path.write_text(text)
    watcher = PolicyWatcher(str(path), interval_seconds=0.05)
    path.unlink()
    watcher.check()
    assert watcher.last_error is not None and "cannot read" in watcher.last_error
    path.write_text(text)
    watcher.check()
    assert watcher.last_error is None and watcher.reload_errors == 1


def test_a_file_over_the_configmap_limit_is_refused_unparsed(tmp_path: Path) -> None:
    """A flow list of 4 MiB took the YAML parser ~40 s of CPU in each worker, with the reload
    thread stuck behind it: a file over what a ConfigMap holds is refused before parsing."""
    path = tmp_path / "policy.yaml"
    text = EXAMPLE_POLICY.read_text()
    path.write_text(text)
    watcher = PolicyWatcher(str(path), interval_seconds=0.05)
    first = watcher.current.version
    huge = text.replace("spec:\n", "spec:\n  padding: [" + "1," * (2 << 20) + "]\n", 1)
    path.write_text(huge)
    started = time.monotonic()
    assert watcher.check() is False and watcher.check() is False
    assert time.monotonic() - started < 1.0
    assert watcher.reload_errors == 1 and watcher.current.version == first
    assert f"is {len(huge)} bytes, larger than the {MAX_POLICY_BYTES}" in (watcher.last_error or "")
    with pytest.raises(PolicyError, match="a ConfigMap holds; not parsed"):
        load_policy_file(str(path))
    path.write_text(text)
    assert watcher.check() is False and watcher.last_error is None


def test_a_tenant_name_that_would_break_the_compiled_policies_keeps_the_last_good(
    tmp_path: Path,
) -> None:
    good = EXAMPLE_POLICY.read_text()
    path = _configmap_volume(tmp_path, good)
    watcher = PolicyWatcher(str(path), interval_seconds=60)
    first = watcher.current
    assert "name: dept-b\n" in good
    _swap(tmp_path, good.replace("name: dept-b\n", 'name: "dept-b\\n"\n', 1), 2)
    assert watcher.check() is False
    assert watcher.current is first
    error = watcher.status().last_error
    assert (
        error is not None and "spec.tenants[1].name: must be a lower-case RFC 1123 label" in error
    )
