"""Command line: ``python -m aot_build inspect PATH|PACKAGE [--json]``, ``schema``, and the
build's steps one at a time (``entries``, ``export``, ``compile``, ``assemble``), which the
Bazel rules in ``rules/`` run as separate actions."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .errors import AotBuildError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aot_build", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    ins = sub.add_parser("inspect", help="list entries, targets and artifacts of a wheel or package")
    ins.add_argument("target", help="a .whl file, a package folder, or an installed package's import name")
    ins.add_argument("--json", action="store_true", help="machine-readable output")
    schema = sub.add_parser("schema", help="print the JSON schema of [tool.aot-build]")
    schema.add_argument("--markdown", action="store_true", help="the settings table (docs/configuration.md)")
    _step_parsers(sub)
    args = parser.parse_args(argv)
    try:
        if args.command in ("entries", "export", "compile", "assemble"):
            _run_step(args)
        elif args.command == "inspect":
            from .inspection import inspect_command

            print(inspect_command(args.target, args.json))
        else:
            from .settings import json_schema, markdown_table

            print(markdown_table() if args.markdown else json.dumps(json_schema(), indent=2))
    except AotBuildError as exc:
        print(f"aot-build: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _step_parsers(sub: Any) -> None:
    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--project", type=Path, default=Path(), help="folder of pyproject.toml")
        p.add_argument("--path", type=Path, help="folder the package imports from (default: --project)")

    ent = sub.add_parser("entries", help="list the project's @aot_entry keys")
    common(ent)
    ent.add_argument(
        "--expect",
        action="append",
        default=[],
        metavar="KEY",
        help="(repeated) fail unless the entries are exactly these, naming each difference",
    )
    ent.add_argument("--listed-in", default="the expected entries", help="what gave --expect, for messages")
    exp = sub.add_parser("export", help="export one entry: its record and programs, into --out")
    common(exp)
    exp.add_argument("--entry", required=True, help="module:qualname")
    exp.add_argument("--targets", required=True, help="comma-separated target names")
    exp.add_argument("--out", type=Path, required=True)
    comp = sub.add_parser("compile", help="compile an exported entry's programs for one target")
    common(comp)
    comp.add_argument("--exported", type=Path, required=True, help="an export step's output folder")
    comp.add_argument("--target", required=True)
    comp.add_argument("--out", type=Path, required=True)
    asm = sub.add_parser("assemble", help="write each package's _aot_build folder under --out")
    asm.add_argument("--exported", type=Path, action="append", default=[], help="(repeated)")
    asm.add_argument("--compiled", type=Path, action="append", default=[], help="(repeated)")
    asm.add_argument("--targets", required=True)
    asm.add_argument("--out", type=Path, required=True)


def _run_step(args: argparse.Namespace) -> None:
    from .compile import steps

    targets = [t for t in getattr(args, "targets", "").split(",") if t]
    if args.command == "assemble":
        steps.assemble_folders(args.exported, args.compiled, targets, args.out)
        return
    project = args.project.resolve()
    path = (args.path or args.project).resolve()
    if args.command == "entries":
        if args.expect:
            print("\n".join(steps.check_entries(project, path, args.expect, args.listed_in)))
        else:
            print("\n".join(steps.entries(project, path)))
    elif args.command == "export":
        steps.export(project, path, args.entry, targets, args.out.resolve())
    else:
        steps.compile_programs(project, path, args.exported.resolve(), args.target, args.out.resolve())


if __name__ == "__main__":
    raise SystemExit(main())
