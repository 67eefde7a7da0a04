"""constraints.txt pins what the tests ran on, and every install takes it.

The lock covers the whole closure of the product's requirements and the `dev` extra, one
`name==version` a line; the venv has exactly those versions, so a lock left behind by an upgrade
fails here naming the package and both versions (the fix: `make lock`). `make venv` and the
image's Dockerfile install with `-c constraints.txt`.
"""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from types import ModuleType

import pytest

from tests.conftest import ROOT

LOCK = ROOT / "constraints.txt"
FIX = "\nrun `make lock` to pin what the venv has (the versions these tests run on)"


def load_lock_tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tools_lock", ROOT / "tools" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


lock = load_lock_tool()


@pytest.fixture(scope="module")
def locked() -> dict[str, str]:
    return lock.parse(LOCK.read_text())


@pytest.fixture(scope="module")
def tested() -> lock.Closure:
    return lock.closure(lock.project_requirements(ROOT / "pyproject.toml"))


def test_every_line_of_the_lock_is_one_sorted_pin(locked: dict[str, str]) -> None:
    lines = [line for line in LOCK.read_text().splitlines() if line and not line.startswith("#")]
    assert lines == [f"{name}=={version}" for name, version in sorted(locked.items())]
    assert "kube-steer" not in locked and "pip" not in locked


def test_the_lock_covers_the_product_and_the_dev_extra(
    locked: dict[str, str], tested: lock.Closure
) -> None:
    roots = lock.project_requirements(ROOT / "pyproject.toml")
    direct = {lock.canonicalize_name(req.name) for req in roots}
    assert {"flask", "kubernetes", "cel-python", "pytest", "mypy", "setuptools"} <= direct
    assert sorted(direct - locked.keys()) == [], FIX
    assert sorted(tested.pins.keys() - locked.keys()) == [], FIX
    # Transitive ones too: the kubernetes client's own, an extra's (urllib3[socks] for selenium).
    assert {"urllib3", "aiohttp", "pysocks", "pydantic-core", "tzdata"} <= locked.keys()


def test_the_venv_has_the_locked_versions(locked: dict[str, str], tested: lock.Closure) -> None:
    problems = lock.differences(locked, tested)
    assert problems == [], "\n".join(problems) + FIX


def test_the_locked_versions_meet_every_declared_range(
    locked: dict[str, str], tested: lock.Closure
) -> None:
    problems = lock.conflicts(locked, tested)
    assert problems == [], "\n".join(problems)


def test_make_lock_would_write_the_lock_as_it_is() -> None:
    check = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "lock.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert check.returncode == 0, check.stderr
    assert LOCK.read_text() == lock.render(lock.parse(LOCK.read_text()))


# --- the walk and the messages, on a made-up set of installed distributions -----------------


INSTALLED = {
    "app": ("1.0", ["lib>=2", 'extra-only; extra == "fast"', 'old-python; python_version < "3"']),
    "lib": ("2.5", ['socks-dep; extra == "socks"']),
    "extra-only": ("0.1", []),
    "socks-dep": ("1.7", []),
}


def fake(name: str) -> tuple[str, list[str]] | None:
    return INSTALLED.get(name)


def test_the_walk_follows_asked_extras_and_markers_for_this_interpreter() -> None:
    plain = lock.closure([lock.Requirement("app")], fake)
    assert plain.pins == {"app": "1.0", "lib": "2.5"}
    fast = lock.closure([lock.Requirement("app[fast]"), lock.Requirement("lib[socks]")], fake)
    assert fast.pins == {"app": "1.0", "extra-only": "0.1", "lib": "2.5", "socks-dep": "1.7"}


def test_a_requirement_not_installed_is_named_with_who_needs_it() -> None:
    with pytest.raises(lock.LockError, match=r"lib \(required by app: lib>=2\).*make venv"):
        lock.closure([lock.Requirement("app")], lambda name: None if name == "lib" else fake(name))


def test_a_stale_lock_names_the_package_both_versions_and_the_fix() -> None:
    tested = lock.closure([lock.Requirement("app")], fake)
    stale = {"app": "1.0", "lib": "2.4", "gone": "3.0"}
    assert lock.differences(stale, tested) == [
        "gone: constraints.txt pins 3.0, but nothing requires it any more",
        "lib: constraints.txt pins 2.4, the venv has 2.5",
    ]
    assert lock.differences({"app": "1.0"}, tested) == [
        "lib: installed (2.5) and required, but not in constraints.txt"
    ]
    assert lock.conflicts(stale, tested) == []
    assert lock.conflicts({"app": "1.0", "lib": "1.9"}, tested) == [
        "app requires lib>=2; constraints.txt pins 1.9"
    ]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("flask>=3.1", "is not one canonical"),
        ("Flask==3.1.3", "is not one canonical"),
        ("flask==3.1.3 ; python_version < '4'", "is not one canonical"),
        ("-e .", "is not one canonical"),
    ],
)
def test_a_line_that_is_not_one_pin_is_refused(line: str, why: str) -> None:
    with pytest.raises(lock.LockError, match=rf"constraints.txt:2: .*{why}.*make lock"):
        lock.parse(f"# header\n{line}\n")


def test_a_package_pinned_twice_is_refused() -> None:
    with pytest.raises(lock.LockError, match=r"constraints.txt:3: flask pinned twice"):
        lock.parse("flask==3.1.3\n\nflask==3.1.2\n")


# --- every install takes the lock --------------------------------------------------------------


def recipe(target: str) -> list[str]:
    """The command lines of one Makefile target."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    commands = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        commands.append(line.strip())
    return commands


def test_make_venv_installs_from_the_lock() -> None:
    makefile = (ROOT / "Makefile").read_text()
    installs = [line.strip() for line in makefile.splitlines() if "pip install" in line]
    project = [line for line in installs if "'.[dev]'" in line]
    assert project and all("-c constraints.txt" in line for line in project), installs
    assert "$(VENV)/.installed: $(BIN)/python pyproject.toml constraints.txt" in makefile
    assert recipe("lock") == ["$(BIN)/python tools/lock.py"]


def test_the_image_builds_and_installs_from_the_lock() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    runs = [shlex.split(line[4:]) for line in dockerfile.splitlines() if line.startswith("RUN ")]
    pip = [cmd for run in runs for cmd in split_and(run) if cmd[:1] == ["pip"]]
    (backend,) = (cmd for cmd in pip if cmd[1] == "install" and "setuptools" in cmd)
    (build,) = (cmd for cmd in pip if cmd[1] == "wheel")
    (final,) = (cmd for cmd in pip if cmd[1] == "install" and "/wheels/*.whl" in cmd)
    for cmd in (backend, build):
        assert "-c" in cmd and cmd[cmd.index("-c") + 1] == "constraints.txt", cmd
    # The pinned backend builds the wheel, not an unpinned one in an isolated environment.
    assert "--no-build-isolation" in build
    assert "--no-index" in final  # the image resolves nothing beyond the wheels built
    assert any("constraints.txt" in line for line in dockerfile.splitlines() if "COPY" in line)


def split_and(words: list[str]) -> list[list[str]]:
    commands: list[list[str]] = [[]]
    for word in words:
        if word == "&&":
            commands.append([])
        else:
            commands[-1].append(word)
    return commands


def test_ci_installs_python_packages_only_through_make() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install" not in ci and "make test" in ci


def test_the_lock_tool_writes_what_it_reads() -> None:
    text = lock.render({"b-pkg": "2.0", "a": "1.0"})
    assert lock.parse(text) == {"a": "1.0", "b-pkg": "2.0"}
    assert text.splitlines()[-2:] == ["a==1.0", "b-pkg==2.0"]
