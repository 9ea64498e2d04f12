"""The build's units as separate commands (``python -m aot_build export|compile|assemble``),
for build systems that run each unit as its own action: the Bazel rules in ``rules/``.

Each command reads only what it is given (the project's sources and pyproject.toml, the
files of earlier steps) and writes only into its output folder; the files are those of
:mod:`.units`, and the code that makes them is the setuptools build's own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .. import backends
from ..build_config import BuildConfig
from ..decorate import AotEntry
from ..discover import discover_entries, list_modules
from ..errors import CompileError
from ..names import package_root
from ..settings import Settings, load_settings
from .build import (
    check_toolchain,
    evaluator_unit,
    manifest_header,
    parse_targets,
    write_package,
)
from .export import Exporter, entry_where
from .pool import compile_here
from .units import ExportedEntry, assemble, read_compiled, tasks_of, write_compiled


def _settings(project: Path) -> Settings:
    return load_settings(project, environ={}) or Settings()


def _discover(project: Path, path: Path) -> list[AotEntry]:
    s = _settings(project)
    packages = sorted(".".join(p.relative_to(path).parent.parts) for p in path.rglob("__init__.py"))
    modules = s.modules or list_modules(path, packages, s.exclude)
    sys.path.insert(0, str(path))
    return discover_entries(modules, packages, path)


def entries(project: Path, path: Path) -> list[str]:
    """The entry keys of the project's packages under ``path`` (for a BUILD file)."""
    return [e.key for e in _discover(project, path)]


def check_entries(project: Path, path: Path, expected: list[str], listed_in: str) -> list[str]:
    """The project's entry keys, once they are exactly ``expected`` (the list a build file
    gives, ``listed_in`` names it); else a CompileError naming each entry missing from the
    list (it would ship without artifacts) and each listed key that is no entry, and the
    list to write."""
    found = {e.key: e for e in _discover(project, path)}
    missing = [k for k in sorted(found) if k not in expected]
    extra = [k for k in expected if k not in found]
    if not missing and not extra:
        return sorted(found)
    lines = [f"{listed_in} differ from the project's @aot_entry functions:"]
    lines += [
        f"  missing: {entry_where(found[k], path)}: add {json.dumps(k)} (else it ships without artifacts "
        "and runs as Python on every user's machine)"
        for k in missing
    ]
    lines += [
        f"  extra: {json.dumps(k)} is no @aot_entry of the project: remove it (or fix its name)"
        for k in extra
    ]
    body = "".join(f"\n        {json.dumps(k)}," for k in sorted(found))
    lines.append(
        f"  the list to write:\n    entries = [{body}\n    ],\n  "
        "(python -m aot_build entries --project DIR prints the keys)"
    )
    raise CompileError("\n".join(lines))


def unsplittable(backend: str) -> str | None:
    """Why entries of ``backend`` cannot be built as separate export and compile actions (it
    compiles in the build process, or its output is not determined by the saved program), or
    None when they can."""
    caps = backends.capabilities(backends.find(backend))
    if caps.in_process:
        return "compiles in the build process (the Python function, not a saved program)"
    if not caps.cacheable:
        return "declares its output not determined by the saved program (cacheable=False)"
    return None


def export(project: Path, path: Path, key: str, targets: list[str], out: Path) -> None:
    """Export the entry ``key`` ("module:qualname") for the devices of ``targets`` into ``out``."""
    module = key.partition(":")[0]
    devices = sorted({t.device for t in parse_targets(targets, "--targets")})
    sys.path.insert(0, str(path))
    found = [e for e in discover_entries([module], [package_root(module)], path) if e.key == key]
    if not found:
        raise CompileError(
            f"{key}: no @aot_entry of that name in module {module!r} under {path}; list the "
            "entries with: python -m aot_build entries PROJECT"
        )
    out.mkdir(parents=True, exist_ok=True)
    exporter = Exporter(path, BuildConfig.from_settings(_settings(project), build_lib=path).backend, out)
    where = entry_where(found[0], path)
    backend = exporter.backend_of(found[0], where)
    why = unsplittable(backend)
    if why:
        raise CompileError(
            f"{where}: its backend {backend} {why}, so it cannot be built as separate export and "
            "compile actions. Build this package with python -m build, or give the entry a "
            'backend that compiles saved programs (@aot_entry(backend="..."))'
        )
    exported = exporter.export_entry(found[0], devices)
    if exporter.unsaved:
        raise CompileError(
            f"{exported.where}: torch.export.save cannot save its program (see the note above); "
            "a separate compile step needs a saved program. Build this package with python -m build"
        )
    exported.write(out)


def compile_programs(project: Path, path: Path, exported_dir: Path, target: str, out: Path) -> None:
    """Compile the programs ``exported_dir`` holds for ``target`` into ``out``."""
    s = _settings(project)
    exported = ExportedEntry.read(exported_dir)
    check_toolchain(s.strip, [exported.backend])
    tasks = tasks_of([exported], parse_targets([target], "--target"))
    out.mkdir(parents=True, exist_ok=True)
    config = BuildConfig.from_settings(s, build_lib=path)
    write_compiled(out, compile_here(tasks, config, exported_dir, out))


def assemble_folders(
    exported_dirs: list[Path], compiled_dirs: list[Path], targets: list[str], out: Path
) -> None:
    """Join the exported records and compiled libraries into each package's artifact folder."""
    exported = [ExportedEntry.read(d) for d in exported_dirs]
    compiled, where = [], {}
    for d in compiled_dirs:
        for c in read_compiled(d):
            compiled.append(c)
            where[c.file] = d
    out.mkdir(parents=True, exist_ok=True)
    evaluator = evaluator_unit(out) if exported else None
    if evaluator is not None:
        where[evaluator.path.name] = out
    try:
        manifests = assemble(
            exported, compiled, parse_targets(targets, "--targets"), manifest_header([]), evaluator
        )
    except KeyError as exc:
        raise CompileError(
            f"no compiled library for program {exc.args[0][0]} and target {exc.args[0][1]}: "
            "give assemble the compile output of every entry and target"
        ) from exc
    for _, manifest in sorted(manifests.items()):
        write_package(manifest, out, lambda name: where[name] / name)
    if evaluator is not None:
        evaluator.path.unlink()
