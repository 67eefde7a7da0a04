"""The `steer` command end to end, as a user runs it."""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import yaml

from launcher.commands import build_parser
from tests.conftest import EXAMPLE_POLICY, ROOT


def steer(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "launcher", *args], capture_output=True, text=True, timeout=60
    )


def test_version() -> None:
    result = steer("version")
    assert result.returncode == 0
    assert result.stdout.startswith("kube-steer ")


def test_validate_example_policy_exits_0() -> None:
    result = steer("policy", "validate", str(EXAMPLE_POLICY))
    assert result.returncode == 0, result.stderr
    assert "valid policy gpu-cluster@" in result.stdout
    assert "8 dimensions, 2 taint rules, 2 tenants" in result.stdout


def test_validate_lists_every_mistake_and_exits_1(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
    doc["spec"]["tenants"][1]["overcommitPercent"] = 150
    doc["spec"]["scoring"]["hysteresis"] = -1
    doc["spec"]["dimensions"][0]["wieght"] = 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    result = steer("policy", "validate", str(bad))
    assert result.returncode == 1
    assert "invalid policy (3 problems)" in result.stderr
    assert "spec.tenants[1].overcommitPercent: must be between 0 and 100, got 150" in result.stderr
    assert "spec.scoring.hysteresis: must be between 0 and 49, got -1" in result.stderr
    assert "spec.dimensions[0].wieght: unknown field" in result.stderr

    as_json = steer("policy", "validate", "--output", "json", str(bad))
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["valid"] is False
    assert {
        "path": "spec.tenants[1].overcommitPercent",
        "message": "must be between 0 and 100, got 150",
    } in report["errors"]


def test_validate_missing_file(tmp_path: Path) -> None:
    result = steer("policy", "validate", str(tmp_path / "nope.yaml"))
    assert result.returncode == 1
    assert (
        "cannot read policy file" in result.stderr and "No such file or directory" in result.stderr
    )


def test_help_explains_commands() -> None:
    result = steer("--help")
    assert result.returncode == 0
    assert "policy" in result.stdout and "version" in result.stdout
    sub = steer("policy", "validate", "--help")
    assert "report format" in sub.stdout and "SteeringPolicy" in sub.stdout


def _actions_without_help(parser: argparse.ArgumentParser, path: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                if not helps.get(name):
                    yield f"{path} {name}"
                yield from _actions_without_help(sub, f"{path} {name}")
        elif not action.help or action.help == argparse.SUPPRESS:
            yield f"{path} {'/'.join(action.option_strings) or action.dest}"


def test_every_command_and_flag_has_help() -> None:
    assert list(_actions_without_help(build_parser(), "steer")) == []


def _make_recipe(target: str) -> list[str]:
    """The command lines of one Makefile target."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{target}:"))
    recipe = []
    for line in lines[start + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def test_make_demo_runs_the_whole_loop() -> None:
    (command,) = _make_recipe("demo")
    program, *args = shlex.split(command)
    assert program == "$(BIN)/python"
    # no command: the whole loop (tests/test_demo.py runs it)
    assert args == ["-m", "kits.demo"]
    result = subprocess.run(
        [sys.executable, "-m", "kits.demo", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    assert "--serve" in result.stdout and "scorer once" in result.stdout


def test_the_kits_are_no_user_command() -> None:
    """The API stand-in and the demo run from the checkout (`python -m kits...`), not `steer`."""
    result = steer("--help")
    assert result.returncode == 0, result.stderr
    assert "apistub" not in result.stdout
    once = steer("scorer", "once", "--help")
    assert once.returncode == 0 and "--demo" not in once.stdout
