"""Compile all entries of a build for all targets, into a staging folder.

Runs in a child process of the setuptools build, so the user's modules are imported into a
fresh interpreter and nothing of the build's own process is touched. It writes only into the
staging folder it is given; the setuptools command moves the result into place once every
entry has compiled, so a failed build leaves no half-written output.

The work is that of :mod:`.export` (each entry) then :mod:`.build` (every program and
target, each package's folder); this module runs them over the discovered entries.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

from ..build_config import BuildConfig
from ..discover import discover_entries
from ..errors import AotBuildError, CompileError
from ..names import package_root
from ..targets import expand_aliases
from . import reuse
from .build import (
    Builder,
    check_toolchain,
    evaluator_unit,
    manifest_header,
    parse_targets,
    report,
    usable_targets,
    write_package,
)
from .export import Exporter, entry_where, say
from .units import ExportedEntry, assemble, tasks_of


def run(config: BuildConfig, record: str | None = None) -> int:
    """Build every entry the job's modules hold into ``config.out_dir``; ``record``: the key to
    record a successful build under (:mod:`.reuse`; None: not recorded)."""
    staging = Path(config.out_dir)
    build_lib = Path(config.build_lib)
    wanted = parse_targets(expand_aliases(list(config.targets)), "[tool.aot-build] targets")
    sys.path.insert(0, str(build_lib))
    entries = discover_entries(list(config.modules), list(config.packages), build_lib)
    if not entries:
        say(f"no @aot_entry functions found in {len(config.modules)} modules; the wheel ships none")
        return 0
    targets, skipped = usable_targets(wanted, config.optional_targets)
    header = manifest_header(skipped)
    if targets:
        check_toolchain(config.strip, {entry.backend or config.backend for entry in entries})
    devices = sorted({t.device for t in targets})
    say(f"exporting {len(entries)} entries for {', '.join(t.name for t in targets) or 'no targets'}")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="aot-build-work-") as tmp:
        work = Path(tmp)
        exporter = Exporter(build_lib, config.backend, work / "programs")
        exporter.programs.mkdir()
        exported: list[ExportedEntry] = []
        failed: list[str] = []
        tops: set[str] = set()
        for entry in entries:
            tops.add(package_root(entry.__wrapped__.__module__))
            if not targets:  # every target was optional and skipped: the manifest says why
                continue
            try:
                exported.append(exporter.export_entry(entry, devices))
            except CompileError as exc:
                failed.append(entry_where(entry, build_lib))
                print(f"\naot-build: error: {exc}\n", file=sys.stderr, flush=True)
        if failed:
            raise CompileError(
                f"{len(failed)} of {len(entries)} entries failed to compile (each error is "
                "above); no artifacts were written:\n  " + "\n  ".join(failed)
            )
        libs = work / "libs"
        libs.mkdir()
        builder = Builder(config, exporter.programs, exporter.unsaved)
        compiled = builder.compile_all(tasks_of(exported, targets), libs, work)
        evaluator = evaluator_unit(libs) if exported else None
        manifests = assemble(exported, compiled, targets, header, evaluator)
        for top in sorted(tops - set(manifests)):
            manifests[top] = replace(header, package=top)
        total = 0
        lines: list[str] = []
        for _, manifest in sorted(manifests.items()):
            write_package(manifest, staging, lambda name: libs / name)
            size, line = report(manifest)
            total += size
            lines.append(line)
    if record and not exporter.unsaved and not skipped:
        reuse.save(config, os.environ, record, reuse.imported_files(), len(compiled), total, lines)
    cache = builder.cache
    cached = (
        f"; build cache {cache.root}: {builder.hits} hit(s), {builder.misses} compiled"
        if cache.root is not None
        else "; build cache off"
    )
    say(f"done in {time.perf_counter() - t0:.1f} s; artifacts add {total / 1e6:.2f} MB to the wheel" + cached)
    return 0


def main(argv: list[str] | None = None, record: str | None = None) -> int:
    """The build's child process; ``record``: the key to record a successful build under."""
    argv = sys.argv[1:] if argv is None else argv
    # torch's own deprecation chatter while pickling tree specs; it says nothing to users.
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
    if len(argv) != 1:
        print("usage: python -m aot_build.compile CONFIG.json", file=sys.stderr)
        return 2
    try:
        return run(BuildConfig.read(Path(argv[0])), record)
    except AotBuildError as exc:
        print(f"\naot-build: error: {exc}", file=sys.stderr, flush=True)
        return 1
