"""Write constraints.txt: every distribution `pip install -e '.[dev]'` installs, pinned to the
version this virtual environment has, which is the version the tests ran on.

pyproject.toml's ranges say what is supported; the lock says what was tested, and every install
(`make venv`, the image's Dockerfile) takes it with `-c constraints.txt`, so a build next month
installs what passed today. The closure starts from pyproject.toml's `dependencies` and its
`dev` extra and follows each installed distribution's own requirements (with the extras asked
of it), markers evaluated for this interpreter; the project itself and pip are not pinned.

    .venv/bin/python tools/lock.py            # `make lock`: rewrite constraints.txt
    .venv/bin/python tools/lock.py --check    # exit 1 naming each package the lock gets wrong

To move to newer releases: `.venv/bin/pip install --upgrade --upgrade-strategy eager -e '.[dev]'`
(or `--upgrade NAME`), run `make test`, then `make lock`.
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "constraints.txt"
EXTRAS = ("dev",)
# One `name==version` a line, the name in its canonical form (PEP 503).
PIN = re.compile(r"(?P<name>[a-z0-9]+(?:-[a-z0-9]+)*)==(?P<version>[A-Za-z0-9.+!_-]+)")

# (version, requirement strings) of an installed distribution, None if it is not installed.
Lookup = Callable[[str], tuple[str, list[str]] | None]


class LockError(Exception):
    pass


@dataclass(frozen=True)
class Edge:
    """One requirement met on the walk: who asked (`pyproject.toml` for the roots) and what."""

    requirer: str
    requirement: Requirement


@dataclass(frozen=True)
class Closure:
    pins: dict[str, str]  # canonical name -> installed version
    edges: tuple[Edge, ...]


def project_requirements(pyproject: Path, extras: Iterable[str] = EXTRAS) -> list[Requirement]:
    project = tomllib.loads(pyproject.read_text())["project"]
    texts = list(project.get("dependencies", []))
    optional = project.get("optional-dependencies", {})
    for extra in extras:
        texts.extend(optional[extra])
    return [Requirement(text) for text in texts]


def installed(name: str) -> tuple[str, list[str]] | None:
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return None
    return dist.version, list(dist.requires or [])


def _applies(requirement: Requirement) -> bool:
    """The marker holds for this interpreter, no extra asked."""
    return requirement.marker is None or requirement.marker.evaluate({"extra": ""})


def closure(roots: Iterable[Requirement], lookup: Lookup = installed) -> Closure:
    """Every distribution the roots need, transitively, at the version installed."""
    pins: dict[str, str] = {}
    edges: list[Edge] = []
    asked: dict[str, set[str]] = {}  # canonical name -> extras already followed
    todo = [("pyproject.toml", req) for req in roots if _applies(req)]
    missing: set[str] = set()
    while todo:
        requirer, req = todo.pop()
        edges.append(Edge(requirer, req))
        name = canonicalize_name(req.name)
        extras = {canonicalize_name(e) for e in req.extras}
        if name in asked and extras <= asked[name]:
            continue
        found = lookup(name)
        if found is None:
            missing.add(f"{name} (required by {requirer}: {req})")
            continue
        version, requires = found
        pins[name] = version
        new_extras = extras - asked.get(name, set())
        first = name not in asked
        asked.setdefault(name, set()).update(extras)
        for text in requires:
            dep = Requirement(text)
            # A plain requirement is followed the first time; one of an extra's, for a new extra.
            if (first and _applies(dep)) or (
                dep.marker is not None
                and any(dep.marker.evaluate({"extra": extra}) for extra in new_extras)
            ):
                todo.append((name, dep))
    if missing:
        raise LockError("; ".join(sorted(missing)) + ": not installed here, run `make venv`")
    return Closure(dict(sorted(pins.items())), tuple(edges))


def render(pins: dict[str, str]) -> str:
    python = ".".join(platform.python_version_tuple()[:2])
    header = (
        "# What the tests ran on: every distribution `pip install -e '.[dev]'` installs, pinned.\n"
        "# Every install takes it (`-c constraints.txt`: make venv, the Dockerfile); the ranges in\n"
        "# pyproject.toml stay what is supported. Written by `make lock` (tools/lock.py) from\n"
        f"# the virtual environment, markers evaluated for Python {python} on "
        f"{sys.platform}: do not edit.\n"
    )
    return header + "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def parse(text: str, source: str = "constraints.txt") -> dict[str, str]:
    """The pins of a lock file; any line that is not one `name==version` is an error."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = PIN.fullmatch(line)
        if match is None:
            raise LockError(
                f"{source}:{number}: {line!r} is not one canonical `name==version` (`make lock`)"
            )
        name = match["name"]
        if name in pins:
            raise LockError(f"{source}:{number}: {name} pinned twice (`make lock`)")
        pins[name] = match["version"]
    return pins


def differences(locked: dict[str, str], tested: Closure) -> list[str]:
    """What the lock gets wrong about the venv's closure, one line a package."""
    found = []
    for name in sorted(locked.keys() | tested.pins.keys()):
        lock, venv = locked.get(name), tested.pins.get(name)
        if lock is None:
            found.append(f"{name}: installed ({venv}) and required, but not in constraints.txt")
        elif venv is None:
            found.append(f"{name}: constraints.txt pins {lock}, but nothing requires it any more")
        elif lock != venv:
            found.append(f"{name}: constraints.txt pins {lock}, the venv has {venv}")
    return found


def conflicts(locked: dict[str, str], tested: Closure) -> list[str]:
    """Requirements on the walk that a locked version does not satisfy."""
    found = []
    for edge in tested.edges:
        name = canonicalize_name(edge.requirement.name)
        version = locked.get(name)
        if version is not None and not edge.requirement.specifier.contains(
            version, prereleases=True
        ):
            found.append(
                f"{edge.requirer} requires {edge.requirement}; constraints.txt pins {version}"
            )
    return sorted(set(found))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    parser.add_argument("--lock", type=Path, default=LOCK, help="the lock file (constraints.txt)")
    args = parser.parse_args(argv)
    lock: Path = args.lock
    try:
        tested = closure(project_requirements(ROOT / "pyproject.toml"))
        if args.check:
            locked = parse(lock.read_text(), lock.name)
            problems = differences(locked, tested) + conflicts(locked, tested)
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                print("run `make lock` to pin what the venv has", file=sys.stderr)
            return 1 if problems else 0
    except (LockError, OSError) as exc:
        print(f"tools/lock.py: {exc}", file=sys.stderr)
        return 1
    lock.write_text(render(tested.pins))
    print(f"{lock.name}: {len(tested.pins)} distributions pinned")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
