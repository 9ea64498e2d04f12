"""Which modules the build imports, and the entries they define."""

from __future__ import annotations

import fnmatch
import importlib
import os
import sys
import traceback
from pathlib import Path

from ..decorate import AotEntry, registered_entries
from ..errors import CompileError
from ..names import top_package


def list_modules(root: Path, packages: list[str], exclude: list[str]) -> list[str]:
    """Dotted names of every ``.py`` module of ``packages`` found under ``root``."""
    names: set[str] = set()
    for package in packages:
        pkg_dir = root / package.replace(".", "/")
        for path in sorted(pkg_dir.glob("*.py")):
            mod = package if path.stem == "__init__" else f"{package}.{path.stem}"
            names.add(mod)
    return sorted(n for n in names if not any(fnmatch.fnmatch(n, pat) for pat in exclude))


def discover_entries(modules: list[str], packages: list[str], root: Path | None = None) -> list[AotEntry]:
    """Import ``modules`` and return the entries defined in ``packages``, sorted by key.

    An import error fails the build and names the module: an entry whose module cannot be
    imported at build time cannot be compiled, and silently shipping without it would hide
    the problem until users run the package. Every module is tried, so one build reports
    every failure; paths under ``root`` (the build folder) are shown relative to it.
    """
    failed: list[str] = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # every module is tried: one build reports every failure
            failed.append(name)
            detail = f"{type(exc).__name__}: {exc}"
            if root is not None:
                detail = detail.replace(f"{root}{os.sep}", "")
            print(
                f"{traceback.format_exc()}\naot-build: error: cannot import module {name!r} to look "
                f"for @aot_entry functions: {detail}\n",
                file=sys.stderr,
                flush=True,
            )
    if failed:
        raise CompileError(
            f"{len(failed)} of {len(modules)} modules failed to import (each error is above): "
            f"{', '.join(failed)}\n  fix the import errors, add the missing packages to "
            "[build-system].requires, or leave modules out with [tool.aot-build] exclude = [...]"
        )
    tops = {top_package(p) for p in packages}
    found = [e for top in sorted(tops) for e in registered_entries(top)]
    return sorted({e.key: e for e in found}.values(), key=lambda e: e.key)
