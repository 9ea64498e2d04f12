"""Compile programs in worker processes, ``jobs`` at a time, with progress.

Each worker is a fresh interpreter (spawn): nothing the user's modules did to the build
process, and no process-wide patch of one compile (the pinned vector ISA) is seen by
another. A worker loads a saved program, compiles it with the task's backend (given the
reproducible compiler wrapper of :mod:`aot_build.toolchain` and its own Inductor cache
folder), and returns the file's description.
The first failure cancels what has not started; what runs finishes; the error names the
entry and the target.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import backends
from ..build_config import BuildConfig
from ..errors import CompileError, compile_failure
from ..targets import parse_target
from ..toolchain import header_folder, headers_in, keep_headers_in, write_wrapper
from .units import Compiled, Source, Task


def load_program(path: Path, module: str) -> Any:
    """``torch.export.load``; when the program uses operators the package registers on
    import, import its module and load again."""
    import torch

    try:
        return torch.export.load(path)
    except Exception:
        if not module:
            raise
        importlib.import_module(module)
        return torch.export.load(path)


def compile_task(
    task: Task, config: BuildConfig, programs: Path, out_dir: Path, cxx: str, batch: int = 1
) -> Compiled:
    """Compile one saved program (in ``programs``) for one target into ``out_dir`` (in a
    worker, or in the calling process); ``cxx``: the compiler wrapper's name; ``batch``: see
    :func:`batches`."""
    ep = load_program(programs / task.program, task.module)
    return compile_program(task, Source(ep), config, out_dir, cxx, batch)


def batches(tasks: list[Task]) -> dict[str, int]:
    """Per target, how many of ``tasks`` the build compiles (:class:`backends.ProgramRequest`'s
    ``batch``): its worker processes share one folder of precompiled headers."""
    counts: dict[str, int] = {}
    for task in tasks:
        counts[task.target] = counts.get(task.target, 0) + 1
    return counts


def compile_program(
    task: Task, source: Source, config: BuildConfig, out_dir: Path, cxx: str = "", batch: int = 1
) -> Compiled:
    """Compile ``source`` (of ``task``) with the task's backend, into ``out_dir``."""
    backend = backends.find(task.backend)
    target = parse_target(task.target)
    request: backends.ProgramRequest | backends.FunctionRequest
    if backend.convention == backends.CALL:
        request = backends.FunctionRequest(
            source.function, source.args, source.dynamic_shapes, source.grad, target, out_dir, config
        )
    else:
        assert source.program is not None, "a FLAT backend's source is a program"
        request = backends.ProgramRequest(source.program, target, out_dir, config, cxx, batch)
    return Compiled.of(task, backend.compile(request), backend.version)


def _needs_compiler(tasks: list[Task]) -> bool:
    return any(backends.capabilities(backends.find(t.backend)).needs_compiler for t in tasks)


def _wrapper(tasks: list[Task], folder: Path) -> tuple[str, dict[str, str]]:
    """The compiler wrapper's name and the workers' environment (:func:`write_wrapper`) when a
    backend of ``tasks`` calls a C++ compiler; else none ("" and no variables)."""
    return write_wrapper(folder) if _needs_compiler(tasks) else ("", {})


def _inductor_root(work: Path) -> Path:
    """The build's Inductor folder in its work folder ``work``: each worker's cache below it,
    and the build's one folder of precompiled headers (:func:`_init_worker`)."""
    return work / "inductor"


@contextmanager
def compiling_here(tasks: list[Task], work: Path) -> Iterator[str]:
    """Set this process up to compile ``tasks`` as the build's workers (:func:`run_tasks`
    with the same ``work``) do: the same compiler wrapper, by name, its folder first on
    ``PATH``, and the same folder of precompiled headers. Inductor names each header by a hash
    of the command line, so these compiles use the headers the workers made, and the other
    way round (with a wrapper of their own, each compile made its headers anew). Yields the
    wrapper's name ("" when no backend of ``tasks`` calls a C++ compiler)."""
    name, env = _wrapper(tasks, work / "cxx")
    old = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    try:
        with headers_in(header_folder(str(_inductor_root(work)))):
            yield name
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _init_worker(env: dict[str, str], build_lib: str, cache_root: str) -> None:
    os.environ.update(env)
    # Own Inductor cache per worker: nothing shared between concurrent compiles; the wrapper
    # maps this path out of the library.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="w-", dir=cache_root)
    # Precompiled headers, though, are one set per build, not per worker: the workers of a
    # cold build all need the same ones at once (Inductor's lock file lets one make each
    # while the others wait, then use it); per worker, a build of two workers made each twice.
    keep_headers_in(header_folder(cache_root))
    if build_lib:
        sys.path.insert(0, build_lib)
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)


def _timed(
    task: Task, config: BuildConfig, programs: Path, out_dir: Path, cxx: str, batch: int
) -> tuple[Compiled, float]:
    t0 = time.perf_counter()
    return compile_task(task, config, programs, out_dir, cxx, batch), time.perf_counter() - t0


def describe_failure(task: Task, exc: BaseException) -> CompileError:
    """``task``'s failure, naming its backend and what to check."""
    try:
        compiler = backends.capabilities(backends.find(task.backend)).needs_compiler
    except (backends.UnknownBackend, TypeError):
        compiler = False
    check = (
        "; check that a C++ compiler is on PATH of the build machine and that inductor-options are valid"
        if compiler
        else ""
    )
    return compile_failure(
        f"{task.where} [{task.target}]",
        f"the {task.backend} backend could not compile it",
        exc,
        f"see the {task.backend} backend's output above{check}",
    )


def compile_here(tasks: list[Task], config: BuildConfig, programs: Path, out_dir: Path) -> list[Compiled]:
    """Compile ``tasks`` (programs saved in ``programs``) into ``out_dir``, one after the other
    in this process, set up as a worker is (for a process that does nothing else: a build
    system's action)."""
    work = Path(tempfile.mkdtemp(prefix="aot-build-"))
    try:
        name, env = _wrapper(tasks, work / "cxx")
        _inductor_root(work).mkdir()
        _init_worker(env, config.build_lib, str(_inductor_root(work)))
        batch = batches(tasks)
        return [compile_task(t, config, programs, out_dir, name, batch[t.target]) for t in tasks]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_tasks(
    tasks: list[Task],
    config: BuildConfig,
    programs: Path,
    out_dir: Path,
    work: Path,
    done: Callable[[Task, Compiled, float], None],
) -> list[Compiled]:
    """Compile ``tasks`` (programs saved in ``programs``) into ``out_dir`` in ``config.jobs``
    worker processes (0: one per core); ``done`` is called as each finishes.
    Raises CompileError naming every failed entry and target; after a failure nothing new starts."""
    if not tasks:
        return []
    name, env = _wrapper(tasks, work / "cxx")
    jobs = config.jobs or os.cpu_count() or 1
    cache_root = _inductor_root(work)
    cache_root.mkdir(parents=True, exist_ok=True)
    results: list[Compiled] = []
    failures: list[tuple[Task, CompileError]] = []
    ctx = multiprocessing.get_context("spawn")
    workers = max(1, min(jobs, len(tasks)))
    batch = batches(tasks)
    with cf.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(env, config.build_lib, str(cache_root)),
    ) as pool:
        # At most `workers` tasks handed out at a time (the executor would queue more ahead
        # of its workers, and a queued task cannot be taken back): after a failure nothing
        # new starts, and what runs finishes.
        queue = list(reversed(tasks))
        running: dict[cf.Future[tuple[Compiled, float]], Task] = {}
        while queue or running:
            while queue and not failures and len(running) < workers:
                task = queue.pop()
                running[pool.submit(_timed, task, config, programs, out_dir, name, batch[task.target])] = task
            if not running:
                break
            finished, _ = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                task = running.pop(fut)
                try:
                    compiled, seconds = fut.result()
                except cf.process.BrokenProcessPool as exc:
                    died = RuntimeError(f"the compile worker died ({exc})")
                    failures.append((task, describe_failure(task, died)))
                    queue.clear()
                    continue
                except Exception as exc:
                    failures.append((task, describe_failure(task, exc)))
                    continue
                results.append(compiled)
                done(task, compiled, seconds)
    if failures:
        for _, error in failures:
            print(f"\naot-build: error: {error}\n", file=sys.stderr, flush=True)
        names = "\n  ".join(f"{t.where} [{t.target}]" for t, _ in failures)
        raise CompileError(
            f"{len(failures)} compile(s) failed (each error is above); the others were stopped "
            f"and no artifacts were written:\n  {names}"
        )
    return results
