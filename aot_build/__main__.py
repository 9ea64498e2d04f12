"""Command line: ``python -m aot_build inspect PATH|PACKAGE [--json]`` and ``schema``."""

from __future__ import annotations

import argparse
import json
import sys

from .errors import AotBuildError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aot_build", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    ins = sub.add_parser("inspect", help="list entries, targets and artifacts of a wheel or package")
    ins.add_argument("target", help="a .whl file, a package folder, or an installed package's import name")
    ins.add_argument("--json", action="store_true", help="machine-readable output")
    sub.add_parser("schema", help="print the JSON schema of [tool.aot-build]")
    args = parser.parse_args(argv)
    try:
        if args.command == "inspect":
            from .inspect import inspect_command

            print(inspect_command(args.target, args.json))
        else:
            from .settings import json_schema

            print(json.dumps(json_schema(), indent=2))
    except AotBuildError as exc:
        print(f"aot-build: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
