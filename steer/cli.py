"""The `steer` command: one entry point for every service and tool.

Each service registers its own subcommands (`register(subparsers)` in `scorer.cli`,
`webhook.cli`, `certs.cli`, ...), so this module only wires them together and owns the
policy commands that both services share.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence

from steer import __version__
from steer.adapters.policy_file import load_policy_file
from steer.core.policy import PolicyError

# Modules that add subcommands; each exposes `register(subparsers)`.
SUBCOMMAND_MODULES = ("scorer.cli", "webhook.cli", "certs.cli", "steer.apistub.cli")


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"kube-steer {__version__}")
    return 0


def _cmd_policy_validate(args: argparse.Namespace) -> int:
    try:
        policy = load_policy_file(args.file)
    except PolicyError as exc:
        if args.output == "json":
            print(
                json.dumps(
                    {
                        "valid": False,
                        "errors": [{"path": i.path, "message": i.message} for i in exc.issues],
                    },
                    indent=2,
                )
            )
        else:
            print(
                f"{args.file}: invalid policy ({len(exc.issues)} problem{'s' if len(exc.issues) != 1 else ''}):",
                file=sys.stderr,
            )
            for issue in exc.issues:
                print(f"  {issue}", file=sys.stderr)
        return 1
    spec = policy.spec
    if args.output == "json":
        print(
            json.dumps(
                {"valid": True, "version": policy.version, "digest": policy.digest}, indent=2
            )
        )
    else:
        print(
            f"{args.file}: valid policy {policy.version} "
            f"({len(spec.dimensions)} dimensions, {len(spec.taints)} taint rules, "
            f"{len(spec.tenants)} tenants, {len(spec.pod_classes)} pod classes, {len(spec.spread)} spread rules)"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="steer",
        description="kube-steer: steer the stock kube-scheduler with node labels scored from "
        "Prometheus and pod mutations at admission.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    version = sub.add_parser("version", help="print the kube-steer version")
    version.set_defaults(func=_cmd_version)

    policy = sub.add_parser("policy", help="work with SteeringPolicy files")
    policy_sub = policy.add_subparsers(dest="policy_command", metavar="ACTION", required=True)
    validate = policy_sub.add_parser(
        "validate",
        help="check a policy file; exit 0 when valid, 1 with every problem listed",
        description="Validate a SteeringPolicy YAML file: field types and ranges, references "
        "between rules, and label keys the apiserver would refuse. All problems are listed.",
    )
    validate.add_argument("file", help="path to the policy YAML file")
    validate.add_argument(
        "--output", choices=("text", "json"), default="text", help="report format (default: text)"
    )
    validate.set_defaults(func=_cmd_policy_validate)

    for module_name in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
