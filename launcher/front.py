"""A front: one command line over the tree of `launcher.commands`.

The tree declares each command once, with its handler. A front decides what differs between
`steer` and `kubectl steer`: which commands it offers, the flags every command takes, how a
command reaches the scorer and how it names a pod. `Front` is `steer`'s; `launcher.kubectl`
holds `kubectl steer`'s. Both parse with a `CommandParser`, which can list every command of the
tree (tests/test_help_pages.py walks every help page of both with it).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launcher.explain import DEFAULT_SCORER_URL, split_pod_ref
from launcher.scorer_client import DirectScorer, ScorerClient


class CommandParser(argparse.ArgumentParser):
    """The parser of the tree and of each of its commands: it keeps its subcommands, so the
    tree can be walked (every command, every help page) without argparse's private
    attributes. argparse makes a subcommand's parser of its parent's class (the documented
    default of `add_subparsers(parser_class=...)`), so the whole tree is of this class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._subcommand_actions: list[argparse.Action] = []

    def add_subparsers(self, **kwargs: Any) -> Any:
        action = super().add_subparsers(**kwargs)
        self._subcommand_actions.append(action)
        return action

    def commands(
        self, words: tuple[str, ...] = ()
    ) -> Iterator[tuple[tuple[str, ...], CommandParser]]:
        """(words, parser) of this parser and of every command and group under it, depth
        first: `()` is the root, `("explain", "pod")` one command."""
        yield words, self
        for action in self._subcommand_actions:
            # A subcommands action's choices: each command's name and its parser.
            choices = action.choices if isinstance(action.choices, Mapping) else {}
            for name, parser in choices.items():
                if not isinstance(parser, CommandParser):  # a parser_class of its own
                    raise TypeError(f"{self.prog} {name}: not a CommandParser, so not walked")
                yield from parser.commands((*words, name))


@dataclass(frozen=True)
class PodRef:
    """A pod that exists."""

    namespace: str
    name: str


@dataclass(frozen=True)
class PodManifest:
    """A Pod or PodSpec in FILE ('-' for stdin); `namespace` picks the tenant, else the
    manifest's own, else `fallback_namespace()`."""

    file: str
    namespace: str | None
    fallback_namespace: Callable[[], str] | None = None


class Front:
    """`steer`: every command, each with its own flags; the scorer at --scorer URL."""

    prog = "steer"
    # Command paths ("explain pod") the front offers; None: every command of the tree.
    commands: frozenset[str] | None = None

    def offers(self, path: str) -> bool:
        """Whether the front offers the command `path`, or, for a group, one under it."""
        if self.commands is None:
            return True
        return any(c == path or c.startswith(path + " ") for c in self.commands)

    def root_parser(self) -> CommandParser:
        return CommandParser(
            prog=self.prog,
            description="kube-steer: steer the stock kube-scheduler with node labels scored "
            "from Prometheus and pod mutations at admission.",
        )

    def add_command(self, actions: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """One command (a leaf of the tree) under `actions`, with the flags the front gives
        every command."""
        parser: argparse.ArgumentParser = actions.add_parser(name, **kwargs)
        return parser

    def add_report_format(self, parser: argparse.ArgumentParser) -> None:
        """`policy validate`'s report format."""
        parser.add_argument(
            "-o",
            "--output",
            choices=("text", "json"),
            default="text",
            help="report format (default: text)",
        )

    def add_scorer_flags(self, parser: argparse.ArgumentParser) -> None:
        """Where the scorer is, and the answer's format, for a command that asks it."""
        parser.add_argument(
            "--scorer",
            metavar="URL",
            default=os.environ.get("STEER_SCORER_URL", DEFAULT_SCORER_URL),
            help=f"scorer base URL (default: $STEER_SCORER_URL or {DEFAULT_SCORER_URL})",
        )
        parser.add_argument(
            "--token",
            default=os.environ.get("STEER_TOKEN"),
            help="bearer token the scorer has the apiserver review (default: $STEER_TOKEN; "
            "none for a scorer run with --authorization none)",
        )
        parser.add_argument(
            "-o",
            "--output",
            choices=("table", "json"),
            default="table",
            help="table for people, json: the scorer's answer as it is (default: table)",
        )

    def add_pod_arguments(self, parser: argparse.ArgumentParser) -> None:
        """How `explain pod` names its pod."""
        parser.description = (
            "Explain a pod: FILE is a Pod or PodSpec (YAML or JSON, '-' for stdin); or "
            "--ref NAMESPACE/NAME for a pod that exists."
        )
        parser.add_argument("file", nargs="?", help="pod manifest (YAML or JSON), '-' for stdin")
        parser.add_argument(
            "--ref", metavar="NAMESPACE/NAME", help="explain an existing pod instead of a file"
        )
        parser.add_argument(
            "--namespace", help="namespace whose tenant applies (default: the manifest's)"
        )

    def pod(self, args: argparse.Namespace) -> PodRef | PodManifest:
        """The pod `explain pod` asks about, as `add_pod_arguments` named it."""
        if args.ref:
            return PodRef(*split_pod_ref(args.ref, "--ref"))
        if not args.file:
            raise SystemExit("give a pod manifest FILE ('-' for stdin) or --ref NAMESPACE/NAME")
        return PodManifest(args.file, args.namespace)

    def scorer(self, args: argparse.Namespace) -> ScorerClient:
        return DirectScorer(args.scorer, token=args.token)

    def parse_args(
        self, parser: argparse.ArgumentParser, argv: Sequence[str] | None
    ) -> argparse.Namespace:
        return parser.parse_args(argv)

    def run(self, args: argparse.Namespace) -> int:
        result: int = args.func(args)
        return result
