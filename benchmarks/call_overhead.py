#!/usr/bin/env python3
"""Per-call cost of aot_build's run-time shim, in the steady state.

Usage (from the repository root, with the dev venv)::

    .venv/bin/python benchmarks/call_overhead.py [--quick] [--json OUT] [--workdir DIR] [--threads N]
    .venv/bin/python benchmarks/call_overhead.py --render OUT     # the tables of a --json file

Three measurements, each in fresh worker processes (this same file, ``--worker MODE``):

1. **Shim overhead against the number of weights.** For stacks of ``nn.Linear`` layers in a
   module global (10, 40, 150, 300 weights; input (4, 64)) and a 2-layer BERT from transformers
   (ids + attention mask (2, 12), dynamic batch and sequence, as in
   ``tests/packages/hf_models/hf_pkg/models.py``): the full call ``entry(*args)`` against the
   bare library call ``runner.run(tensors)`` on the very tensor tuple the shim passes (caught
   by wrapping the variant's ``run`` for one call). Also timed alone: the variant's generated
   check ``check.fast(None, *leaves)`` and building the result object
   ``build(outputs, leaves, tensors)``. Overhead = median(full) − median(bare); "rest" =
   overhead − check − build (argument binding, mode/flag tests, dispatch).
2. **Dispatch with 1 and 8 variants.** One entry with one example-input set; one with 8 sets
   of different ranks (same dtype: the shim tries the candidates' checks in turn) and one with
   8 sets of different dtypes (same rank: a table lookup). The first and the last input set are
   called; per case median(full) − median(bare run of the variant that served the call).
3. **Dynamic vs static artifacts vs torch.compile vs eager** for example_pkg's pre-norm
   attention block (d_model 64, seq 32) at batch 2, 16 and 64: one dynamic entry (batch
   1..64) and one static entry per size. One fresh worker per size, so torch.compile (default
   mode, warmed up) sees a single shape and specialises as it would in a real program.

Method: the benchmark packages are written to ``--workdir`` (default ``/tmp/bench-scratch``)
and compiled for ``cpu-avx2`` with the build's child process ``python -m aot_build.compile
job.json``, as the setuptools hook would; a package is rebuilt only when its sources, the
compile side of aot_build (everything but ``aot_build/load``), torch or the target changed.
Workers run with ``AOT_BUILD_STRICT=1`` (a fallback to Python is an error, never a silently
different number), under ``torch.no_grad()``, with torch's default number of threads unless
``--threads`` sets ``OMP_NUM_THREADS`` (the output says how many). Each worker first checks
that the entry is bound to its artifacts and that the compiled result equals
``entry.__wrapped__`` (``torch.allclose``). Timing: ``time.perf_counter_ns`` around a loop of N
calls, N calibrated per contender so a loop takes ``--loop-ms``; contenders alternate in rounds
(order rotated each round); medians over ``--rounds`` rounds, in µs per call. Run nothing else
on the machine meanwhile; the load average before and after is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _bench import (
    REPO,
    build_package,
    compile_side_hash,
    dispatch,
    emit_result,
    error_text,
    first_line,
    interleaved,
    logger,
    number,
    publish,
    run_meta,
    same_result,
)

HERE = Path(__file__).resolve()
RESULT_MARK = "@@CALL_OVERHEAD_RESULT@@"
TARGET = "cpu-avx2"
#: Bump when the generated package sources or the build steps change meaning.
BUILD_VERSION = 1

STACK_WEIGHTS = (10, 40, 150, 300)
QUICK_STACK_WEIGHTS = (10, 150)
ATTN_SIZES = (2, 16, 64)

# --------------------------------------------------------------------------------------------
# Benchmark packages (sources written to the work folder and compiled there)
# --------------------------------------------------------------------------------------------

_STACK = '''\
"""{layers} nn.Linear(64, 64) layers ({weights} weights) in a module global."""

import torch
from torch import nn

from aot_build import aot_entry

torch.manual_seed(0)

STACK = nn.Sequential(*[nn.Linear(64, 64) for _ in range({layers})]).eval()


@aot_entry(example_inputs=lambda: (torch.randn(4, 64),))
def forward(x: torch.Tensor) -> torch.Tensor:
    return STACK(x)
'''

#: The BERT (and GPT-2) entries of the transformers test package, used as they are.
_BERT_SOURCE = REPO / "tests" / "packages" / "hf_models" / "hf_pkg" / "models.py"

_DISPATCH = '''\
"""The same tiny function with 1 and with 8 example-input sets (static shapes)."""

import torch

from aot_build import aot_entry

DTYPES = [
    torch.float32, torch.float64, torch.float16, torch.bfloat16,
    torch.int64, torch.int32, torch.int16, torch.int8,
]


def _ranks() -> list[tuple[torch.Tensor]]:
    return [(torch.ones((2,) * rank),) for rank in range(1, 9)]


def _dtypes() -> list[tuple[torch.Tensor]]:
    return [(torch.ones(4, 8, dtype=d),) for d in DTYPES]


@aot_entry(example_inputs=lambda: (torch.ones(4, 8),))
def one(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


@aot_entry(example_inputs=_ranks)
def eight_ranks(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1


@aot_entry(example_inputs=_dtypes)
def eight_dtypes(x: torch.Tensor) -> torch.Tensor:
    return x * 2 + 1
'''

#: example_pkg's blocks as they are (``attention_block``: dynamic batch 1..64), plus one
#: static entry per benchmarked batch size.
_ATTN_SOURCE = REPO / "example_pkg" / "example_pkg" / "blocks.py"
_ATTN_STATIC = """

@aot_entry(example_inputs=lambda: (torch.randn({batch}, SEQ, D_MODEL),))
def attention_b{batch}(x: torch.Tensor) -> torch.Tensor:
    return MLP(ATTENTION(x)) / TEMPERATURE
"""


def _package(doc: str, models: str) -> dict[str, str]:
    return {"__init__.py": f'"""{doc}"""\n', "models.py": models}


def packages(stack_weights: tuple[int, ...]) -> dict[str, dict[str, str]]:
    """Benchmark packages by name: file name → source."""
    out: dict[str, dict[str, str]] = {}
    for w in stack_weights:
        out[f"bench_stack{w}"] = _package("Linear stack.", _STACK.format(layers=w // 2, weights=w))
    out["bench_bert"] = _package("BERT.", _BERT_SOURCE.read_text(encoding="utf-8"))
    out["bench_dispatch"] = _package("Dispatch.", _DISPATCH)
    attn = _ATTN_SOURCE.read_text(encoding="utf-8") + "".join(
        _ATTN_STATIC.format(batch=b) for b in ATTN_SIZES
    )
    out["bench_attn"] = _package("Attention block.", attn)
    return out


# --------------------------------------------------------------------------------------------
# Worker side (fresh interpreter; imports torch and the benchmark package)
# --------------------------------------------------------------------------------------------


_err = error_text


def _import_models(cfg: dict[str, Any]) -> Any:
    """The benchmark package's module, imported with the built package first on sys.path."""
    import importlib

    sys.path.insert(0, cfg["site"])
    return importlib.import_module(cfg["module"])


@dataclass
class Served:
    """How the shim served one call: the ``_Bound`` entry, the ``_VariantRunner`` whose
    library ran, the tensor tuple and argument leaves it passed to that variant's ``run``, and
    how many variants' checks ran (the served one included)."""

    bound: Any
    variant: Any
    tensors: tuple[Any, ...]
    leaves: tuple[Any, ...]
    checks_run: int


def _served_by(entry: Any, args: tuple[Any, ...]) -> Served:
    """Call ``entry(*args)`` twice (strict mode; callers hold ``torch.no_grad()``): the first
    binds it, the second runs with spies on every variant's ``check.fast`` and ``run``
    (instance attributes shadowing them for that call only)."""
    import importlib

    # By name: the shim's internals are what this benchmark reaches into.
    bound_type = importlib.import_module("aot_build.load.shim")._Bound
    entry(*args)
    bound = entry._call
    if not isinstance(bound, bound_type):
        raise RuntimeError(f"{entry.key} is not bound to artifacts: _call is {bound!r}")
    runs: list[tuple[Any, tuple[Any, ...], tuple[Any, ...]]] = []
    checks: list[Any] = []

    def spies(v: Any) -> Callable[..., Any]:
        fast, run = v.check.fast, v.run

        def spy_fast(*a: Any) -> Any:
            checks.append(v)
            return fast(*a)

        def spy_run(r: tuple[Any, ...], held: Any, leaves: tuple[Any, ...], *call: Any) -> Any:
            runs.append((v, r + held.tensors, leaves))
            return run(r, held, leaves, *call)

        v.check.fast, v.run = spy_fast, spy_run
        return fast  # an instance attribute of the check: put back after the call

    originals = [(v, spies(v)) for v in bound.variants]
    try:
        entry(*args)
    finally:
        for v, fast in originals:
            v.check.fast = fast
            del v.run  # the method shows through again
    if len(runs) != 1:
        raise RuntimeError(f"expected one library run for {entry.key}, saw {len(runs)}")
    v, r, leaves = runs[0]
    return Served(bound, v, r, leaves, len(checks))


def _bind_call(fn: Callable[..., Any], args: tuple[Any, ...]) -> Callable[[], object]:
    return lambda: fn(*args)


def _w_overhead(cfg: dict[str, Any]) -> dict[str, Any]:
    """Table 1: full call vs bare library call, check alone, result building alone."""
    import torch

    mod = _import_models(cfg)
    entry = getattr(mod, cfg["entry"])
    res: dict[str, Any] = {"label": cfg["label"], "num_threads": torch.get_num_threads()}
    torch.manual_seed(1234)
    args = tuple(entry.input_sets()[0][0])
    with torch.no_grad():
        served = _served_by(entry, args)
        bound, v, r, leaves = served.bound, served.variant, served.tensors, served.leaves
        ref = entry.__wrapped__(*args)
        out = entry(*args)
        if not same_result(torch, out, ref):
            raise RuntimeError(f"{entry.key}: compiled result differs from entry.__wrapped__")
        runner = v.runner(torch.device("cpu"))
        fast = v.check.fast(None, *leaves)
        held = v.state_check(None)
        if type(fast) is int or any(a is not b for a, b in zip(fast + held.tensors, r, strict=True)):
            raise RuntimeError(f"check.fast gave {fast!r:.200}, not the tensors the shim ran")
        raw = runner.run(r)
        built = v.build(raw, leaves, r)
        if not same_result(torch, built, out):
            raise RuntimeError("build(runner.run(tensors)) differs from the entry's result")
        build = v.build

        def check() -> object:  # arguments, then guards and weights, as the shim checks them
            v.check.fast(None, *leaves)
            return v.state_check(None)

        fns: dict[str, Callable[[], object]] = {
            "eager": lambda: entry.__wrapped__(*args),
            "full": lambda: entry(*args),
            "bare": lambda: runner.run(r),
            "check": check,
            "build": lambda: build(raw, leaves, r),
        }
        for f in fns.values():
            for _ in range(cfg["warmup"]):
                f()
        res.update(interleaved(fns, cfg["rounds"], cfg["loop_ms"]))
    var = v.variant
    res.update(
        weights=len(var.state.weights),
        tensors=len(r),
        tensor_args=v.n_tensors,
        guards=sum(var.state.count().values()),
        variants=len(bound.variants),
        checks_run=served.checks_run,
        size_one=list(var.size_one),
        signature=var.signature(),
    )
    return res


def _w_dispatch(cfg: dict[str, Any]) -> dict[str, Any]:
    """Table 2: 1 vs 8 variants, the first and the last input set."""
    import torch

    mod = _import_models(cfg)
    res: dict[str, Any] = {"num_threads": torch.get_num_threads(), "cases": []}
    fns: dict[str, Callable[[], object]] = {}
    with torch.no_grad():
        for name, which in cfg["cases"]:
            entry = getattr(mod, name)
            sets = entry.input_sets()
            index = 0 if which == "first" else len(sets) - 1
            args = tuple(sets[index][0])
            served = _served_by(entry, args)
            v = served.variant
            if not same_result(torch, entry(*args), entry.__wrapped__(*args)):
                raise RuntimeError(f"{entry.key}: compiled result differs from entry.__wrapped__")
            if v.variant.input_set != index:
                raise RuntimeError(f"{entry.key}: input set {index} was served by set {v.variant.input_set}")
            runner = v.runner(torch.device("cpu"))
            key = f"{name}/{which}"
            fns[key + "/full"] = _bind_call(entry, args)
            fns[key + "/bare"] = _bind_call(runner.run, (served.tensors,))
            res["cases"].append(
                {
                    "key": key,
                    "entry": name,
                    "which": which,
                    "variants": len(served.bound.variants),
                    "input_set": index,
                    "checks_run": served.checks_run,
                    "signature": v.variant.signature(),
                }
            )
        for f in fns.values():
            for _ in range(cfg["warmup"]):
                f()
        res.update(interleaved(fns, cfg["rounds"], cfg["loop_ms"]))
    return res


def _w_sizes(cfg: dict[str, Any]) -> dict[str, Any]:
    """Table 3, one batch size: dynamic artifact, static artifact, torch.compile, eager."""
    import torch

    mod = _import_models(cfg)
    batch = cfg["batch"]
    dynamic = mod.attention_block
    static = getattr(mod, f"attention_b{batch}")
    torch.manual_seed(1234)
    x = torch.randn(batch, 32, 64)
    res: dict[str, Any] = {"batch": batch, "num_threads": torch.get_num_threads()}
    with torch.no_grad():
        eager = dynamic.__wrapped__
        compiled = torch.compile(eager)
        t = time.perf_counter()
        compiled(x)
        res["compile_first_call_s"] = time.perf_counter() - t
        res["dynamic_variant"] = _served_by(dynamic, (x,)).variant.variant.signature()
        res["static_variant"] = _served_by(static, (x,)).variant.variant.signature()
        ref = eager(x)
        for name, f in (("dynamic", dynamic), ("static", static), ("compile", compiled)):
            if not same_result(torch, f(x), ref):
                raise RuntimeError(f"{name} result differs from eager at batch {batch}")
        fns: dict[str, Callable[[], object]] = {
            "eager": lambda: eager(x),
            "compile": lambda: compiled(x),
            "static": lambda: static(x),
            "dynamic": lambda: dynamic(x),
        }
        for f in fns.values():
            for _ in range(cfg["warmup"]):
                f()
        res.update(interleaved(fns, cfg["rounds"], cfg["loop_ms"]))
    return res


def _worker(mode: str, cfg: dict[str, Any]) -> None:
    workers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "overhead": _w_overhead,
        "dispatch": _w_dispatch,
        "sizes": _w_sizes,
    }
    try:
        res = workers[mode](cfg)
        import torch

        res["torch"] = torch.__version__
    except Exception as exc:
        res = {"mode": mode, "error": _err(exc)}
    emit_result(RESULT_MARK, res)


# --------------------------------------------------------------------------------------------
# Driver side
# --------------------------------------------------------------------------------------------


_log = logger("call_overhead")


def build(name: str, files: dict[str, str], work: Path, salt: str, rebuild: bool) -> Path:
    return build_package(name, files, [TARGET], work, salt, rebuild)


def spawn(mode: str, cfg: dict[str, Any], work: Path, timeout: float = 900) -> dict[str, Any]:
    """One worker in a fresh interpreter; its result is the JSON after RESULT_MARK."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AOT_BUILD", "TORCHINDUCTOR"))}
    env["AOT_BUILD_STRICT"] = "1"
    env["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor-cache")
    if cfg.get("threads"):
        env["OMP_NUM_THREADS"] = str(cfg["threads"])
    cwd = work / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(HERE), "--worker", mode, "--config", json.dumps(cfg)]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "error": f"timed out after {timeout} s"}
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(RESULT_MARK)), None)
    if line is None:
        return {
            "mode": mode,
            "error": f"worker exited {proc.returncode} without a result\n{proc.stderr[-3000:]}",
        }
    res: dict[str, Any] = json.loads(line[len(RESULT_MARK) :])
    res["process_wall_s"] = time.perf_counter() - t
    if "error" in res:
        res["stderr_tail"] = proc.stderr[-2000:]
    return res


def _meta() -> dict[str, Any]:
    return run_meta("aot_build")


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


_f = number


_first_line = first_line


def _threads(report: dict[str, Any]) -> str:
    found = {int(r["num_threads"]) for r in _all_results(report) if r.get("num_threads") is not None}
    return ", ".join(str(t) for t in sorted(found)) or "?"


def _all_results(report: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from report.get("overhead", [])
    if report.get("dispatch"):
        yield report["dispatch"]
    yield from report.get("sizes", [])


def render(report: dict[str, Any]) -> str:
    m, c = report["meta"], report["config"]
    before = ", ".join(f"{x:.2f}" for x in m["loadavg_before"])
    after = ", ".join(f"{x:.2f}" for x in m.get("loadavg_after", ()))
    n_dirty = len(m["git_dirty_paths"])
    dirty = f", uncommitted changes in {n_dirty} files under aot_build/" if n_dirty else ""
    out = [
        "### Call overhead: `benchmarks/call_overhead.py`" + (" (--quick)" if c["quick"] else ""),
        "",
        f"- Date: {m['date']}",
        f"- Machine: `{m['cpu']}` ({m['nproc']} CPUs), `{m['platform']}`; Python {m['python']}, "
        f"torch {m['torch']}, torch threads in the workers: {_threads(report)}"
        + (f" (`OMP_NUM_THREADS={c['threads']}`)" if c.get("threads") else " (torch's default)"),
        f"- Code: git HEAD `{m['git_head']}`{dirty}; artifacts for `{TARGET}`",
        f"- Command: `{m['command']}`",
        f"- Timing: {c['rounds']} rounds per contender, interleaved (order rotated), loops of "
        f"~{c['loop_ms']:g} ms; medians, µs per call; `AOT_BUILD_STRICT=1`, `torch.no_grad()`",
        f"- Load average (1, 5, 15 min): {before} before, {after} after",
        "",
    ]
    out += [
        "#### Shim overhead per call against the number of weights",
        "",
        "Overhead = median(`entry(*args)`) − median(bare `runner.run(tensors)` on the same tensor "
        "tuple). Check = the served variant's `check.fast`; build = building the result object; "
        "rest = overhead − check − build (binding arguments, mode tests, dispatch, the other "
        "variants' failing checks). Variants: compiled variants (checks run per call).",
        "",
        "| model | weights | tensors to the library | variants | eager | full call | bare `runner.run` | "
        "**overhead** | check | build | rest |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report.get("overhead", []):
        if "error" in r:
            out.append(f"| {r.get('label', '?')} | failed: `{_first_line(r['error'])}` ||||||||||")
            continue
        md = r["median_us"]
        overhead = md["full"] - md["bare"]
        rest = overhead - md["check"] - md["build"]
        out.append(
            f"| {r['label']} | {r['weights']} | {r['tensors']} | "
            f"{r['variants']} ({r.get('checks_run', '?')}) | "
            f"{_f(md['eager'])} | {_f(md['full'])} | "
            f"{_f(md['bare'])} | **{_f(overhead)}** | {_f(md['check'])} | {_f(md['build'])} | {_f(rest)} |"
        )
    out += [
        "",
        "#### Dispatch: 1 variant against 8",
        "",
        "Overhead = median(full call) − median(bare `runner.run` of the variant that served it). "
        '"checks run": the served variant\'s position among the candidates the shim checks in turn.',
        "",
        "| entry | variants | input set called | checks run | full call | bare `runner.run` | **overhead** |",
        "|---|---|---|---|---|---|---|",
    ]
    d = report.get("dispatch")
    if d and "error" in d:
        out.append(f"| failed: `{_first_line(d['error'])}` |||||||")
    elif d:
        md = d["median_us"]
        for case in d["cases"]:
            full, bare = md[case["key"] + "/full"], md[case["key"] + "/bare"]
            out.append(
                f"| `{case['entry']}` | {case['variants']} | {case['which']} (`{case['signature']}`) | "
                f"{case['checks_run'] or '?'} | {_f(full)} | {_f(bare)} | **{_f(full - bare)}** |"
            )
    served = next((r["dynamic_variant"] for r in report.get("sizes", []) if "dynamic_variant" in r), "?")
    out += [
        "",
        "#### Steady state: dynamic artifact, static artifact, torch.compile, eager",
        "",
        "example_pkg's attention block (d_model 64, seq 32). Dynamic artifact: batch 1..64, served "
        f"by its variant `{served}`; one static artifact per size; torch.compile of "
        "`entry.__wrapped__`, default mode, warmed up, one shape per process.",
        "",
        "| batch | eager | torch.compile | static artifact | dynamic artifact | dynamic / static | "
        "static / torch.compile |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report.get("sizes", []):
        if "error" in r:
            out.append(f"| {r.get('batch', '?')} | failed: `{_first_line(r['error'])}` ||||||")
            continue
        md = r["median_us"]
        out.append(
            f"| {r['batch']} | {_f(md['eager'])} | {_f(md['compile'])} | {_f(md['static'])} | "
            f"{_f(md['dynamic'])} | {md['dynamic'] / md['static']:.2f}× | "
            f"{md['static'] / md['compile']:.2f}× |"
        )
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="smoke run: fewer rounds, 10- and 150-weight stacks")
    p.add_argument("--json", type=Path, help="write the raw numbers here")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/bench-scratch"), help="builds and caches")
    p.add_argument("--rounds", type=int, help="rounds per measurement (default 21; --quick 5)")
    p.add_argument("--loop-ms", type=float, help="length of one timed loop (default 60; --quick 20)")
    p.add_argument("--warmup", type=int, default=20, help="calls per contender before timing")
    p.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for workers (0: torch's default)")
    p.add_argument("--rebuild", action="store_true", help="recompile the benchmark packages")
    p.add_argument("--render", type=Path, help="print the tables of a --json file; measure nothing")
    args = p.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())))
        return 0
    rounds = args.rounds or (5 if args.quick else 21)
    loop_ms = args.loop_ms or (20.0 if args.quick else 60.0)
    stacks = QUICK_STACK_WEIGHTS if args.quick else STACK_WEIGHTS
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)

    meta = _meta()
    _log(f"load average before: {meta['loadavg_before']}")
    salt = f"v{BUILD_VERSION} {compile_side_hash()} torch {meta['torch']} {TARGET}"
    sites = {n: str(build(n, files, work, salt, args.rebuild)) for n, files in packages(stacks).items()}
    common = {"rounds": rounds, "loop_ms": loop_ms, "warmup": args.warmup, "threads": args.threads}

    overhead: list[dict[str, Any]] = []
    models = [(f"bench_stack{w}", f"{w // 2} × nn.Linear(64, 64), input (4, 64)") for w in stacks]
    models.append(("bench_bert", "2-layer BERT, ids + mask (2, 12), dynamic"))
    for pkg, label in models:
        entry = "encode" if pkg == "bench_bert" else "forward"
        _log(f"shim overhead: {label}")
        cfg = {**common, "site": sites[pkg], "module": f"{pkg}.models", "entry": entry, "label": label}
        overhead.append(spawn("overhead", cfg, work))
    _log("dispatch: 1 and 8 variants")
    cases = [["one", "first"]] + [[e, w] for e in ("eight_ranks", "eight_dtypes") for w in ("first", "last")]
    cfg_d = {**common, "site": sites["bench_dispatch"], "module": "bench_dispatch.models", "cases": cases}
    dispatch = spawn("dispatch", cfg_d, work)
    sizes: list[dict[str, Any]] = []
    for batch in ATTN_SIZES:
        _log(f"dynamic vs static vs torch.compile vs eager, batch {batch}")
        cfg = {**common, "site": sites["bench_attn"], "module": "bench_attn.models", "batch": batch}
        sizes.append(spawn("sizes", cfg, work))
    meta["loadavg_after"] = os.getloadavg()
    _log(f"load average after: {meta['loadavg_after']}")
    report: dict[str, Any] = {
        "meta": meta,
        "config": {**common, "quick": args.quick, "stacks": list(stacks), "target": TARGET, "sites": sites},
        "overhead": overhead,
        "dispatch": dispatch,
        "sizes": sizes,
    }
    for r in _all_results(report):
        if "error" in r:
            _log(f"a worker failed:\n{textwrap.indent(r['error'], '    ')}")
    return publish(report, render(report), args.json, _log)


if __name__ == "__main__":
    dispatch(_worker, main)
