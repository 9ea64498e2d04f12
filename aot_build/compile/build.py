"""The build step of a build: compiling the exported programs for each target (from the build
cache, in worker processes, or in this process), and writing each package's artifact folder.

Used by the setuptools build's child process (:mod:`.driver`) and by the Bazel actions
(:mod:`.steps`).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

import torch

from .. import __version__, backends
from ..backends import Built
from ..build_config import BuildConfig
from ..constants import ARTIFACT_DIR, ENV_CROSS_TORCH, MANIFEST_NAME
from ..errors import CompileError
from ..guards import native
from ..manifest import Manifest
from ..targets import Target, cuda_build_problem, machine, parse_target
from ..toolchain import FloorError, binutil, build_floor, floor_args, real_compiler
from .cache import BuildCache
from .export import say
from .pool import batches, compile_program, compiling_here, describe_failure, load_program, run_tasks
from .specs import dtype_name
from .units import Compiled, Source, Task


def parse_targets(names: list[str], what: str) -> list[Target]:
    """``names`` as targets; CompileError naming ``what`` gave them."""
    try:
        return [parse_target(n) for n in names]
    except ValueError as exc:
        raise CompileError(f"{what}: {exc}") from exc


def manifest_header(skipped: list[dict[str, str]]) -> Manifest:
    """The build-wide fields every manifest of a build made by this process carries."""
    return Manifest(
        package="",
        aot_build_version=__version__,
        torch_version=torch.__version__,
        python_version=f"{sys.version_info[0]}.{sys.version_info[1]}",
        machine=machine(),
        default_dtype=dtype_name(torch.get_default_dtype()),
        skipped_targets=skipped,
    )


def usable_targets(
    targets: list[Target], optional: Collection[str]
) -> tuple[list[Target], list[dict[str, str]]]:
    """The ``targets`` this machine can build, and the skipped ones (``{"target", "reason"}``,
    recorded in the manifest); a CompileError for a target it cannot build that is not in
    ``optional``."""
    usable: list[Target] = []
    skipped: list[dict[str, str]] = []
    for t in targets:
        reason = cuda_build_problem(t) if t.device == "cuda" else None
        if reason:
            if t.name not in optional:
                raise CompileError(
                    f"target {t.name}: {reason}. Or mark it optional: "
                    f'[tool.aot-build] optional-targets = ["{t.name}"]'
                )
            say(f"skipping optional target {t.name}: {reason}")
            skipped.append({"target": t.name, "reason": reason})
            continue
        usable.append(t)
    return usable, skipped


def artifact_folder(staging: Path, package: str) -> Path:
    """``<staging>/<package path>/_aot_build``: where a package root's artifacts are written."""
    return staging.joinpath(*package.split(".")) / ARTIFACT_DIR


def evaluator_unit(out_dir: Path) -> Built:
    """The guard evaluator every package of the build ships (:mod:`aot_build.guards.native`),
    held to the build's manylinux floor; in a cross build, compiled by the target's C compiler
    (``CC``, else the C compiler beside ``CXX``: ``aarch64-linux-gnu-gcc``)."""
    try:
        cc = native.c_compiler()
        if os.environ.get(ENV_CROSS_TORCH, "").strip():
            cxx = real_compiler()
            beside = cxx[: -len("g++")] + "gcc" if cxx.endswith("g++") else ""
            cc = shlex.split(os.environ["CC"]) if os.environ.get("CC") else [beside or cxx]
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            floor = floor_args(build_floor(), cc[0], Path(tmp))
            strip = binutil(cc[0], "strip")
            return native.build_unit(
                out_dir, cc=cc, compile_args=floor.compile, link_args=floor.link, strip=strip
            )
    except (native.EvaluatorBuildError, FloorError) as exc:
        raise CompileError(str(exc)) from exc


def check_toolchain(strip: bool, used: Iterable[str]) -> None:
    """Fail before any export when a backend of ``used`` needs a C++ compiler at build time
    (:attr:`~aot_build.backends.Capabilities.needs_compiler`) and there is none (every entry
    would fail the same way, minutes later); note a missing ``strip`` when one ships native
    libraries. Backends that are not installed are skipped (their entries' export names them)."""
    found: dict[str, backends.Capabilities] = {}
    for name in sorted(set(used)):
        try:
            found[name] = backends.capabilities(backends.find(name))
        except (backends.UnknownBackend, TypeError):
            continue
    compiling = [name for name, caps in found.items() if caps.needs_compiler]
    if compiling:
        from torch._inductor.cpp_builder import get_cpp_compiler

        try:
            get_cpp_compiler()
        except Exception as exc:
            which = (
                f"The {compiling[0]} backend compiles"
                if len(compiling) == 1
                else (f"The {', '.join(compiling)} backends compile")
            )
            raise CompileError(
                f"no working C++ compiler on the build machine ({type(exc).__name__}: {exc}). "
                f"{which} with one at build time.\n  install g++ (apt-get install g++, dnf "
                "install gcc-c++) or point CXX at a compiler"
            ) from exc
    if strip and any(caps.native for caps in found.values()) and not shutil.which("strip"):
        say(
            "note: strip = true, but there is no 'strip' on PATH (binutils): the libraries ship "
            "with their symbol tables, about 5x larger. Install binutils, or set strip = false"
        )


def write_package(manifest: Manifest, staging: Path, source: Callable[[str], Path]) -> None:
    """Write ``manifest``'s package folder under ``staging`` (:func:`artifact_folder`): its
    files, each copied from ``source(name)``, and the manifest."""
    folder = artifact_folder(staging, manifest.package)
    folder.mkdir(parents=True, exist_ok=True)
    for name in manifest.files:
        shutil.copyfile(source(name), folder / name)
    manifest.write(folder / MANIFEST_NAME)


def report(manifest: Manifest) -> tuple[int, str]:
    """Say what one package ships; its size in bytes and the line said."""
    size = sum(f.size for f in manifest.files.values())
    per_target: dict[str, int] = {}
    seen: set[str] = set()
    for e in manifest.entries.values():
        for v in e.variants:
            for a in v.artifacts:
                if a.file not in seen:
                    seen.add(a.file)
                    per_target[a.target] = per_target.get(a.target, 0) + manifest.files[a.file].size
    detail = ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in per_target.items())
    line = (
        f"package {manifest.package}: {len(manifest.entries)} entries, {len(manifest.files)} files, "
        f"{size / 1e6:.2f} MB ({detail})"
    )
    say(line)
    return size, line


class Builder:
    """Compiles the tasks of one build.

    Args:
        config: the build's configuration.
        programs: the folder of saved programs (:attr:`.export.Exporter.programs`).
        unsaved: programs compiled in this process, by name (:attr:`.export.Exporter.unsaved`).
    """

    def __init__(self, config: BuildConfig, programs: Path, unsaved: Mapping[str, Source]) -> None:
        self.config = config
        self.programs = programs
        self.unsaved = unsaved
        self.cache = BuildCache(Path(config.cache_dir) if config.cache_dir else None, config.cache_max_bytes)
        self.hits = self.misses = 0

    def in_process(self, task: Task) -> bool:
        """Whether ``task`` is compiled in this process: its program could not be saved, or
        its backend compiles in process (:attr:`~aot_build.backends.Capabilities.in_process`)."""
        return task.program in self.unsaved or backends.capabilities(backends.find(task.backend)).in_process

    def uncached(self, tasks: list[Task]) -> set[str]:
        """The backends of ``tasks`` whose outputs the build cache does not keep, each named
        once in a note saying why."""
        names: set[str] = set()
        for name in sorted({t.backend for t in tasks}):
            caps = backends.capabilities(backends.find(name))
            why = (
                "it compiles in the build process, not from a saved program"
                if caps.in_process
                else "it declares its output not determined by the program (cacheable=False)"
                if not caps.cacheable
                else ""
            )
            if why:
                names.add(name)
                if self.cache.root is not None:
                    say(f"note: the build cache does not keep the {name} backend's outputs: {why}")
        return names

    def compile_all(self, tasks: list[Task], out_dir: Path, work: Path) -> list[Compiled]:
        """Every task: from the build cache, or compiled by the workers or in this process;
        one line each."""
        total = len(tasks)
        count = 0
        keys: dict[Task, str] = {}
        compiled: list[Compiled] = []

        def line(task: Task, c: Compiled, seconds: float, how: str) -> None:
            nonlocal count
            count += 1
            if self.config.progress:
                say(
                    f"[{count}/{total}] {task.label} [{task.target}] {how} in "
                    f"{seconds:.1f} s, {c.size / 1e6:.2f} MB, ISA {c.isa or '-'}"
                )

        todo: list[Task] = []
        uncached = self.uncached(tasks)
        for task in tasks:
            if self.cache.root is None or task.program in self.unsaved or task.backend in uncached:
                todo.append(task)
                continue
            t0 = time.perf_counter()
            data = (self.programs / task.program).read_bytes()
            backend = backends.find(task.backend)
            key = keys[task] = self.cache.key(
                data,
                parse_target(task.target),
                self.config.inductor_options,
                self.config.strip,
                (backend.name, backend.version),
                compiler=backends.capabilities(backend).needs_compiler,
            )
            hit = self.cache.get(key, out_dir)
            if hit is None:
                todo.append(task)
                continue
            c = Compiled.of(task, hit, backend.version)
            compiled.append(c)
            self.hits += 1
            line(task, c, time.perf_counter() - t0, "from the build cache")

        def done(task: Task, c: Compiled, seconds: float) -> None:
            self.misses += 1
            if task in keys:
                self.cache.put(keys[task], Built(out_dir / c.file, c.sha256, c.size, c.isa))
            line(task, c, seconds, "compiled")

        pooled = [t for t in todo if not self.in_process(t)]
        jobs = self.config.jobs or os.cpu_count() or 1
        if pooled:
            say(f"compiling {len(pooled)} program(s) in {min(jobs, len(pooled))} worker process(es)")
        compiled += run_tasks(pooled, self.config, self.programs, out_dir, work, done)
        here = [t for t in todo if self.in_process(t)]
        if not here:
            return compiled
        batch = batches(here)
        with compiling_here(here, work) as cxx:
            for task in here:
                t0 = time.perf_counter()
                try:
                    source = self.unsaved.get(task.program) or Source(
                        load_program(self.programs / task.program, task.module)
                    )
                    c = compile_program(task, source, self.config, out_dir, cxx, batch[task.target])
                except Exception as exc:
                    raise describe_failure(task, exc) from exc
                compiled.append(c)
                done(task, c, time.perf_counter() - t0)
        return compiled
