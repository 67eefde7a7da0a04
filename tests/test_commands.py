"""The command tree (launcher/commands.py): `steer` and `kubectl steer` are one tree, and the
launcher sits above the services, which sit above the core and adapters (`steer`)."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from typing import Any

import grimp

from launcher.commands import build_parser
from launcher.front import CommandParser, Front
from launcher.kubectl import KUBECTL_COMMANDS, KubectlFront
from tests.conftest import ROOT


def _commands(parser: CommandParser) -> Iterator[tuple[str, Any]]:
    """(path, handler) of every command, a leaf of the tree."""
    tree = dict(parser.commands())
    for words, sub in tree.items():
        if not any(other[: len(words)] == words and other != words for other in tree):
            yield " ".join(words), sub.get_default("func")


def test_kubectl_steer_is_the_declared_subset_of_the_steer_tree_with_the_same_handlers() -> None:
    steer = dict(_commands(build_parser(Front())))
    kubectl = dict(_commands(build_parser(KubectlFront())))
    assert set(kubectl) == KUBECTL_COMMANDS
    assert set(kubectl) < set(steer)
    for path, handler in kubectl.items():
        assert callable(handler), path
        assert handler is steer[path], path


def test_the_handlers_ask_their_front_how_to_reach_the_scorer() -> None:
    for front in (Front(), KubectlFront()):
        args = front.parse_args(build_parser(front), ["explain", "nodes"])
        assert args.front is front


def test_the_floors_import_one_way() -> None:
    graph = grimp.build_graph("steer", "scorer", "controller", "webhook", "certs", "launcher")
    for above in ("scorer", "controller", "webhook", "certs", "launcher"):
        assert not graph.chain_exists("steer", above, as_packages=True), above
    assert not graph.chain_exists("scorer", "controller", as_packages=True)
    for service in ("scorer", "controller", "webhook", "certs"):
        assert not graph.chain_exists(service, "launcher", as_packages=True), service
    # Plain imports only: the launcher loads no module by name, out of the contracts' sight.
    for source in (ROOT / "launcher").glob("*.py"):
        assert "import_module" not in source.read_text(), source.name


def test_pyproject_declares_the_floors_for_lint_imports() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = project["tool"]["importlinter"]["contracts"]
    top_floors = [c["layers"] for c in contracts if c["type"] == "layers" and "containers" not in c]
    assert top_floors == [["launcher", "controller | scorer | webhook", "certs", "steer"]]
    forbidden = {
        tuple(c["source_modules"]): set(c["forbidden_modules"])
        for c in contracts
        if c["type"] == "forbidden"
    }
    assert {"scorer", "webhook", "certs", "launcher"} <= forbidden[("steer",)]
    assert "launcher" in forbidden[("scorer", "controller", "webhook", "certs")]
    assert "launcher*" in project["tool"]["setuptools"]["packages"]["find"]["include"]
    assert project["project"]["scripts"] == {
        "steer": "launcher.commands:main",
        "kubectl-steer": "launcher.commands:kubectl_main",
    }
