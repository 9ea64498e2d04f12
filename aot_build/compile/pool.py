"""Compile programs in worker processes, ``jobs`` at a time, with progress.

Each worker is a fresh interpreter (spawn): nothing the user's modules did to the build
process, and no process-wide patch of one compile (the pinned vector ISA) is seen by
another. A worker loads a saved program, compiles it with the reproducible compiler wrapper
(:mod:`.toolchain`) and its own Inductor cache folder, and returns the library's description.
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
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .. import rules
from ..errors import CompileError, compile_failure
from ..targets import parse_target
from .toolchain import keep_headers_in, write_wrapper
from .units import Compiled, Source, Task


@dataclass
class Options:
    """What every compile of a build shares."""

    programs_dir: str
    out_dir: str
    inductor_options: dict[str, Any] = field(default_factory=dict)
    strip: bool = True
    #: Compiler name given to Inductor (the wrapper's); "" : Inductor's own choice.
    cxx: str = ""
    #: Folder on sys.path where the package's modules are (to import custom operators).
    build_lib: str = ""


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


def compile_task(task: Task, opts: Options) -> Compiled:
    """Compile one program for one target (in a worker, or in the calling process)."""
    ep = load_program(Path(opts.programs_dir) / task.program, task.module)
    return compile_program(task, Source(ep), opts)


def compile_program(task: Task, source: Source, opts: Options) -> Compiled:
    """Compile ``source`` (of ``task``) with the task's rule."""
    rule = rules.find(task.rule)
    request = rules.CompileRequest(
        source.program,
        parse_target(task.target),
        Path(opts.out_dir),
        opts.inductor_options,
        opts.strip,
        opts.cxx,
        function=source.function,
        args=source.args,
        dynamic_shapes=source.dynamic_shapes,
        grad=source.grad,
    )
    return Compiled.of(task, rule.compile(request), rule.version)


def _init_worker(env: dict[str, str], build_lib: str, cache_root: str) -> None:
    os.environ.update(env)
    # Own Inductor cache per worker: nothing shared between concurrent compiles; the wrapper
    # maps this path out of the library.
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache = tempfile.mkdtemp(prefix="w-", dir=cache_root)
    keep_headers_in(cache)
    if build_lib:
        sys.path.insert(0, build_lib)
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)


def _timed(task: Task, opts: Options) -> tuple[Compiled, float]:
    t0 = time.perf_counter()
    return compile_task(task, opts), time.perf_counter() - t0


def describe_failure(task: Task, exc: BaseException) -> CompileError:
    return compile_failure(
        f"{task.where} [{task.target}]",
        f"the {task.rule} rule could not compile it",
        exc,
        "see the compiler output above; check that a C++ compiler is on PATH of the build "
        "machine and that inductor-options are valid",
    )


def compile_here(tasks: list[Task], opts: Options) -> list[Compiled]:
    """Compile ``tasks`` one after the other in this process, set up as a worker is (for a
    process that does nothing else: a build system's action)."""
    work = Path(tempfile.mkdtemp(prefix="aot-build-"))
    try:
        name, env = write_wrapper(work / "cxx")
        (work / "inductor").mkdir()
        _init_worker(env, opts.build_lib, str(work / "inductor"))
        opts = replace(opts, cxx=name)
        return [compile_task(t, opts) for t in tasks]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_tasks(
    tasks: list[Task],
    opts: Options,
    jobs: int,
    work: Path,
    done: Callable[[Task, Compiled, float], None],
) -> list[Compiled]:
    """Compile ``tasks`` in ``jobs`` worker processes; ``done`` is called as each finishes.
    Raises CompileError naming every failed entry and target; after a failure nothing new starts."""
    if not tasks:
        return []
    name, env = write_wrapper(work / "cxx")
    opts = replace(opts, cxx=name)
    cache_root = work / "inductor"
    cache_root.mkdir(parents=True, exist_ok=True)
    results: list[Compiled] = []
    failures: list[tuple[Task, CompileError]] = []
    ctx = multiprocessing.get_context("spawn")
    workers = max(1, min(jobs, len(tasks)))
    with cf.ProcessPoolExecutor(
        max_workers=workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(env, opts.build_lib, str(cache_root)),
    ) as pool:
        # At most `workers` tasks handed out at a time (the executor would queue more ahead
        # of its workers, and a queued task cannot be taken back): after a failure nothing
        # new starts, and what runs finishes.
        queue = list(reversed(tasks))
        running: dict[cf.Future[tuple[Compiled, float]], Task] = {}
        while queue or running:
            while queue and not failures and len(running) < workers:
                task = queue.pop()
                running[pool.submit(_timed, task, opts)] = task
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
