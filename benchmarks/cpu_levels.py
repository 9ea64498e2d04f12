#!/usr/bin/env python3
"""What each CPU target's artifact costs per call: ``cpu-baseline`` (portable, no vector ISA)
against eager and against ``cpu-avx2`` (and ``cpu-avx512``), on example_pkg.

Usage (from the repository root, with the dev venv)::

    .venv/bin/python benchmarks/cpu_levels.py [--quick] [--json OUT] [--workdir DIR] [--threads N]
    .venv/bin/python benchmarks/cpu_levels.py --render OUT     # the table of a --json file

Question: a library author ships ``cpu`` (= ``cpu-avx2`` + ``cpu-baseline``) by default, and
may add ``cpu-avx512``. A host below AVX2 loads the baseline artifact: how much slower is it
than the AVX2 one, and is it still faster than eager PyTorch on that host? And what does
``cpu-avx512`` add on a host that has it?

Method: example_pkg's sources (``example_pkg/example_pkg``: entries ``mlp_block``,
``attention_block``, ``normalize``, ``split_heads_stats``) are copied to ``--workdir`` (default
``/tmp/bench-scratch/cpu-levels``) and compiled for ``cpu-avx512``, ``cpu-avx2`` and
``cpu-baseline`` with the build's child process ``python -m aot_build.compile job.json``, as
the setuptools hook would; the build is reused until the sources, the compile side of
aot_build (everything but ``aot_build/load``) or torch change (``--rebuild`` forces it).

One fresh worker process (this same file, ``--worker``) per CPU level, the built package
first on ``sys.path``, ``AOT_BUILD_STRICT=1`` (a fallback to Python is an error, never a
silently different number), under ``torch.no_grad()``, with torch's default number of threads
unless ``--threads`` sets ``OMP_NUM_THREADS``. The level is chosen with torch's own variable
``ATEN_CPU_CAPABILITY`` (``avx512`` / ``avx2`` / ``default``): aot_build's shim follows torch's
capability, so the worker loads that level's artifact, and eager runs torch's kernels of that
level — what a host of that level would see. Each worker checks torch's capability and
``entry.loaded_target()`` against the level, and that the compiled result equals
``entry.__wrapped__`` (``torch.allclose``, rtol 1e-4, atol 1e-5), then times, per entry, the
compiled call ``entry(*args)`` and eager ``entry.__wrapped__(*args)``. One more worker, without
the variable, times eager at the host's full capability (the reference a host user compares
with). The AVX-512 level is skipped, with a note, on a host whose CPU flags lack
avx512f/bw/dq/vl/cd.

Caveat: ``ATEN_CPU_CAPABILITY`` caps ATen's own vectorised kernels only. The BLAS libraries
(MKL, oneDNN) pick their instruction set from the CPU itself, so matrix products — in eager
and in the artifacts, which call ``aten::mm`` for them — keep running at the host's best level,
and the lower levels' GEMM-heavy figures (``mlp_block``, ``attention_block``) are optimistic
for a real host of that level. ``--cap-blas`` also sets ``MKL_ENABLE_INSTRUCTIONS`` and
``ONEDNN_MAX_CPU_ISA`` per level (AVX512/AVX512_CORE, AVX2/AVX2, SSE4_2/SSE41) to cap those too.

Inputs: ``mlp_block`` and ``attention_block`` (dynamic batch 1..64) at batch ``--batch``
(default 16), sequence 32, d_model 64; ``normalize`` and ``split_heads_stats`` at their first
example-input set; random values, same seed in every worker.

Timing: ``time.perf_counter_ns`` around a loop of N calls, N calibrated per contender so a loop
takes ``--loop-ms``; the two contenders of an entry alternate in rounds (order rotated each
round); ``--rounds`` rounds. The levels run one after another, so the whole set of workers runs
``--passes`` times (level order rotated each pass) and every figure is the median of all its
loops, in µs per call. Run nothing else on the machine meanwhile; the load average before and
after is printed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _bench import (
    REPO,
    build_package,
    compile_side_hash,
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
RESULT_MARK = "@@CPU_LEVELS_RESULT@@"
PACKAGE = "example_pkg"
SOURCES = REPO / "example_pkg" / PACKAGE
#: Bump when the build steps change meaning.
BUILD_VERSION = 1

#: CPU levels, best first: (level, aot_build target, ATEN_CPU_CAPABILITY, torch's capability name).
LEVELS: tuple[tuple[str, str, str, str], ...] = (
    ("avx512", "cpu-avx512", "avx512", "AVX512"),
    ("avx2", "cpu-avx2", "avx2", "AVX2"),
    ("baseline", "cpu-baseline", "default", "DEFAULT"),
)
TARGETS = [t for _, t, _, _ in LEVELS]
#: The level the others are compared with ("against cpu-avx2").
REFERENCE_LEVEL = "avx2"
#: /proc/cpuinfo flags the AVX-512 level needs (torch's AVX512 level, cpu-avx512's -march).
AVX512_FLAGS = ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd")
#: Entries, in table order; those in BATCHED are called at batch --batch.
ENTRIES = ("mlp_block", "attention_block", "normalize", "split_heads_stats")
BATCHED = frozenset({"mlp_block", "attention_block"})
#: --cap-blas: per level, the variables that cap MKL's and oneDNN's instruction sets.
BLAS_CAPS: dict[str, dict[str, str]] = {
    "avx512": {"MKL_ENABLE_INSTRUCTIONS": "AVX512", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE"},
    "avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
    "baseline": {"MKL_ENABLE_INSTRUCTIONS": "SSE4_2", "ONEDNN_MAX_CPU_ISA": "SSE41"},
}
BLAS_VARS = ("MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")

# --------------------------------------------------------------------------------------------
# Worker side (fresh interpreter; imports torch and the built package)
# --------------------------------------------------------------------------------------------


def _arguments(torch: Any, entry: Any, name: str, batch: int) -> tuple[Any, ...]:
    """The entry's first example-input set; for BATCHED entries, random inputs of the same
    shape but ``batch`` rows (their ``dynamic_shapes`` allow batch 1..64)."""
    torch.manual_seed(1234)
    args = tuple(entry.example_sets()[0])
    if name in BATCHED:
        x = args[0]
        args = (torch.randn(batch, *x.shape[1:], dtype=x.dtype), *args[1:])
    return args


def _describe_args(torch: Any, args: tuple[Any, ...]) -> str:
    return ", ".join(
        "×".join(str(s) for s in a.shape) if isinstance(a, torch.Tensor) else repr(a) for a in args
    )


def _worker(cfg: dict[str, Any]) -> dict[str, Any]:
    """One CPU level (or the host reference, ``cfg["target"]`` None): every entry, compiled
    against eager, interleaved."""
    sys.path.insert(0, cfg["site"])
    import importlib

    import torch

    res: dict[str, Any] = {
        "level": cfg["level"],
        "aten_cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY"),
        "blas_caps": {k: os.environ[k] for k in BLAS_VARS if k in os.environ},
        "torch_capability": torch.backends.cpu.get_cpu_capability(),
        "num_threads": torch.get_num_threads(),
        "entries": {},
    }
    if cfg["capability"] and res["torch_capability"] != cfg["capability"]:
        raise RuntimeError(
            f"ATEN_CPU_CAPABILITY={res['aten_cpu_capability']} gave torch capability "
            f"{res['torch_capability']}, not {cfg['capability']}"
        )
    pkg = importlib.import_module(PACKAGE)
    pkg_file = Path(pkg.__file__ or "").resolve()
    if not pkg_file.is_relative_to(Path(cfg["site"]).resolve()):
        raise RuntimeError(f"imported {PACKAGE} from {pkg_file}, not from the build in {cfg['site']}")
    if not (pkg_file.parent / "_aot_build").is_dir():
        raise RuntimeError(f"{pkg_file.parent} has no _aot_build folder")
    with torch.no_grad():
        for name in ENTRIES:
            entry = getattr(pkg, name)
            args = _arguments(torch, entry, name, cfg["batch"])
            loaded = entry.loaded_target()
            if cfg["target"] and loaded != cfg["target"]:
                raise RuntimeError(f"{entry.key}: loaded target {loaded}, expected {cfg['target']}")
            eager = entry.__wrapped__
            if not same_result(torch, entry(*args), eager(*args)):
                raise RuntimeError(f"{entry.key}: compiled result differs from entry.__wrapped__")
            fns: dict[str, Callable[[], object]] = {"eager": functools.partial(eager, *args)}
            if cfg["target"]:
                fns["compiled"] = functools.partial(entry, *args)
            for f in fns.values():
                for _ in range(cfg["warmup"]):
                    f()
            timing = interleaved(fns, cfg["rounds"], cfg["loop_ms"])
            res["entries"][name] = {"args": _describe_args(torch, args), "loaded_target": loaded, **timing}
    return res


def _worker_main(cfg: dict[str, Any]) -> None:
    try:
        res = _worker(cfg)
        import torch

        res["torch"] = torch.__version__
    except Exception as exc:
        res = {"level": cfg.get("level"), "error": error_text(exc)}
    emit_result(RESULT_MARK, res)


# --------------------------------------------------------------------------------------------
# Driver side
# --------------------------------------------------------------------------------------------


_log = logger("cpu_levels")


def _sources() -> dict[str, str]:
    """example_pkg's modules: file name → source."""
    return {f.name: f.read_text(encoding="utf-8") for f in sorted(SOURCES.glob("*.py"))}


def build(work: Path, salt: str, rebuild: bool) -> Path:
    """Compile example_pkg for TARGETS (cached by hash); return the folder to put on sys.path."""
    return build_package(PACKAGE, _sources(), list(TARGETS), work, salt, rebuild)


def spawn(cfg: dict[str, Any], aten: str | None, work: Path, timeout: float = 900) -> dict[str, Any]:
    """One worker in a fresh interpreter, ``ATEN_CPU_CAPABILITY=aten`` (None: unset) and, with
    ``cfg["blas"]``, those BLAS caps; its result is the JSON after RESULT_MARK."""
    skip = ("AOT_BUILD", "TORCHINDUCTOR", "ATEN_CPU_CAPABILITY", *BLAS_VARS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(skip)}
    env.update(cfg.get("blas") or {})
    env["AOT_BUILD_STRICT"] = "1"
    env["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor-cache")
    if aten is not None:
        env["ATEN_CPU_CAPABILITY"] = aten
    if cfg.get("threads"):
        env["OMP_NUM_THREADS"] = str(cfg["threads"])
    cwd = work / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(HERE), "--worker", "--config", json.dumps(cfg)]
    t = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"level": cfg["level"], "error": f"timed out after {timeout} s"}
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(RESULT_MARK)), None)
    if line is None:
        return {
            "level": cfg["level"],
            "error": f"worker exited {proc.returncode} without a result\n{proc.stderr[-3000:]}",
        }
    res: dict[str, Any] = json.loads(line[len(RESULT_MARK) :])
    res["process_wall_s"] = time.perf_counter() - t
    if "error" in res:
        res["stderr_tail"] = proc.stderr[-2000:]
    return res


def _cpu_flags() -> frozenset[str]:
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = ln.partition(":")
            if key.strip() in ("flags", "Features"):
                return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def _meta() -> dict[str, Any]:
    return run_meta("aot_build", "example_pkg")


def _merge(passes: list[dict[str, Any]]) -> dict[str, Any]:
    """One level's workers (one per pass) as one result: every loop of every pass pooled, the
    median over all of them. A failed pass makes the level failed (its error is kept)."""
    failed = next((r for r in passes if "error" in r), None)
    if failed is not None:
        return failed
    first = passes[0]
    out: dict[str, Any] = {k: v for k, v in first.items() if k not in ("entries", "process_wall_s")}
    out["passes"] = len(passes)
    out["num_threads"] = sorted({r["num_threads"] for r in passes})
    out["entries"] = {}
    for name, e in first["entries"].items():
        pooled: dict[str, list[float]] = {k: [] for k in e["per_call_us"]}
        for r in passes:
            for k, v in r["entries"][name]["per_call_us"].items():
                pooled[k] += v
        out["entries"][name] = {
            "args": e["args"],
            "loaded_target": e["loaded_target"],
            "per_call_us": pooled,
            "pass_medians_us": [r["entries"][name]["median_us"] for r in passes],
            "median_us": {k: statistics.median(v) for k, v in pooled.items()},
        }
    return out


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> str:
    return "—" if a is None or b is None or b == 0 else f"{a / b:.2f}×"


def _median(r: dict[str, Any] | None, entry: str, key: str) -> float | None:
    if not r or "error" in r or "skipped" in r:
        return None
    value = r["entries"].get(entry, {}).get("median_us", {}).get(key)
    return float(value) if value is not None else None


def _threads(report: dict[str, Any]) -> str:
    found: set[int] = set()
    for r in [*report["levels"].values(), report["host"]]:
        n = r.get("num_threads")
        found |= set(n) if isinstance(n, list) else ({n} if n is not None else set())
    return ", ".join(str(t) for t in sorted(found)) or "?"


def render(report: dict[str, Any]) -> str:
    m, c = report["meta"], report["config"]
    levels: dict[str, dict[str, Any]] = report["levels"]
    host = report["host"]
    before = ", ".join(f"{x:.2f}" for x in m["loadavg_before"])
    after = ", ".join(f"{x:.2f}" for x in m.get("loadavg_after", ()))
    n_dirty = len(m["git_dirty_paths"])
    dirty = f", uncommitted changes in {n_dirty} files under aot_build/ or example_pkg/" if n_dirty else ""
    host_cap = host.get("torch_capability", "?") if "error" not in host else "?"
    out = [
        "### CPU levels: `benchmarks/cpu_levels.py`" + (" (--quick)" if c["quick"] else ""),
        "",
        f"- Date: {m['date']}",
        f"- Machine: `{m['cpu']}` ({m['nproc']} CPUs), `{m['platform']}`; Python {m['python']}, "
        f"torch {m['torch']} (host capability {host_cap}), torch threads in the workers: "
        f"{_threads(report)}"
        + (f" (`OMP_NUM_THREADS={c['threads']}`)" if c.get("threads") else " (torch's default)"),
        f"- Code: git HEAD `{m['git_head']}`{dirty}; example_pkg built for {', '.join(c['targets'])}",
        f"- Command: `{m['command']}`",
        f"- Timing: {c['passes']} pass(es) of one fresh worker per level (order rotated), "
        f"{c['rounds']} rounds per contender per pass, compiled and eager interleaved, loops of "
        f"~{c['loop_ms']:g} ms; medians of all loops, µs per call; `AOT_BUILD_STRICT=1`, "
        "`torch.no_grad()`",
        "- BLAS: "
        + (
            "capped per level too (`--cap-blas`: `MKL_ENABLE_INSTRUCTIONS`, `ONEDNN_MAX_CPU_ISA`)"
            if c.get("cap_blas")
            else "not capped: MKL/oneDNN matrix products run at the host's best level in every "
            "column (`ATEN_CPU_CAPABILITY` caps ATen's kernels only; see `--cap-blas`)"
        ),
        f"- Load average (1, 5, 15 min): {before} before, {after} after",
        "",
        "Per level (`ATEN_CPU_CAPABILITY`): compiled = `entry(*args)` with that level's artifact; "
        "eager = `entry.__wrapped__(*args)` with torch's kernels of that level; c/e = compiled / "
        f"eager; c/{REFERENCE_LEVEL} = compiled / compiled at `cpu-{REFERENCE_LEVEL}`. Host eager: "
        f"eager without the variable (torch at {host_cap}).",
        "",
    ]
    shown = [(lv, t, a) for lv, t, a, _ in LEVELS if "skipped" not in levels.get(lv, {})]
    head = ["entry (input)"]
    for _lv, t, a in shown:
        head += [f"`{t}` compiled", f"eager ({a})", "c/e", f"c/{REFERENCE_LEVEL}"]
    head.append(f"host eager ({host_cap})")
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name in ENTRIES:
        args = next(
            (r["entries"][name]["args"] for r in [*levels.values(), host] if name in r.get("entries", {})),
            "?",
        )
        row = [f"`{name}` ({args})"]
        ref = _median(levels.get(REFERENCE_LEVEL), name, "compiled")
        for lv, _, _ in shown:
            comp = _median(levels.get(lv), name, "compiled")
            eag = _median(levels.get(lv), name, "eager")
            row += [number(comp), number(eag), f"**{_ratio(comp, eag)}**", _ratio(comp, ref)]
        row.append(number(_median(host, name, "eager")))
        out.append("| " + " | ".join(row) + " |")
    notes = []
    for lv, t, _, _ in LEVELS:
        r = levels.get(lv, {})
        if "skipped" in r:
            notes.append(f"- `{t}` skipped: {r['skipped']}")
        elif "error" in r:
            notes.append(f"- `{t}` failed: `{first_line(r['error'])}`")
    if "error" in host:
        notes.append(f"- host eager reference failed: `{first_line(host['error'])}`")
    host_loaded = {e.get("loaded_target") for e in host.get("entries", {}).values()}
    if host_loaded and "error" not in host:
        notes.append(
            "- Without `ATEN_CPU_CAPABILITY` this host loads "
            + ", ".join(f"`{t}`" for t in sorted(str(x) for x in host_loaded))
        )
    if notes:
        out += ["", *notes]
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="smoke run: 1 pass, fewer rounds, shorter loops")
    p.add_argument("--json", type=Path, help="write the raw numbers here")
    p.add_argument(
        "--workdir", type=Path, default=Path("/tmp/bench-scratch/cpu-levels"), help="build and caches"
    )
    p.add_argument("--rounds", type=int, help="rounds per contender per pass (default 21; --quick 5)")
    p.add_argument("--loop-ms", type=float, help="length of one timed loop (default 60; --quick 20)")
    p.add_argument("--passes", type=int, help="workers per level, order rotated (default 3; --quick 1)")
    p.add_argument("--warmup", type=int, default=20, help="calls per contender before timing")
    p.add_argument("--batch", type=int, default=16, help="batch of mlp_block / attention_block (1..64)")
    p.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for workers (0: torch's default)")
    p.add_argument(
        "--cap-blas",
        action="store_true",
        help="also cap MKL's and oneDNN's instruction set per level "
        "(MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA)",
    )
    p.add_argument("--rebuild", action="store_true", help="recompile example_pkg")
    p.add_argument("--render", type=Path, help="print the table of a --json file; measure nothing")
    args = p.parse_args(argv)
    if args.render:
        print(render(json.loads(args.render.read_text())))
        return 0
    if platform.machine().lower() not in ("x86_64", "amd64"):
        raise SystemExit("cpu_levels.py compares x86-64 CPU levels; this host is " + platform.machine())
    if not 1 <= args.batch <= 64:
        raise SystemExit("--batch must be 1..64 (example_pkg's dynamic batch range)")
    rounds = args.rounds or (5 if args.quick else 21)
    loop_ms = args.loop_ms or (20.0 if args.quick else 60.0)
    passes = args.passes or (1 if args.quick else 3)
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)

    meta = _meta()
    _log(f"load average before: {meta['loadavg_before']}")
    salt = f"v{BUILD_VERSION} {compile_side_hash()} torch {meta['torch']}"
    site = str(build(work, salt, args.rebuild))
    common = {
        "site": site,
        "rounds": rounds,
        "loop_ms": loop_ms,
        "warmup": args.warmup,
        "threads": args.threads,
        "batch": args.batch,
    }

    missing = [f for f in AVX512_FLAGS if f not in _cpu_flags()]
    runs: list[tuple[str, str | None, dict[str, Any]]] = []  # (level, ATEN_CPU_CAPABILITY, config)
    skipped: dict[str, dict[str, Any]] = {}
    for level, target, aten, capability in LEVELS:
        if level == "avx512" and missing:
            skipped[level] = {"level": level, "skipped": f"this CPU lacks {', '.join(missing)}"}
            _log(f"skipping {target}: {skipped[level]['skipped']}")
            continue
        blas = BLAS_CAPS[level] if args.cap_blas else {}
        cfg = {**common, "level": level, "target": target, "capability": capability, "blas": blas}
        runs.append((level, aten, cfg))
    runs.append(("host", None, {**common, "level": "host", "target": None, "capability": None}))

    results: dict[str, list[dict[str, Any]]] = {level: [] for level, _, _ in runs}
    for i in range(passes):
        order = runs[i % len(runs) :] + runs[: i % len(runs)]
        for level, cap_env, cfg in order:
            _log(f"pass {i + 1}/{passes}: {level} (ATEN_CPU_CAPABILITY={cap_env or 'unset'})")
            results[level].append(spawn(cfg, cap_env, work))
    meta["loadavg_after"] = os.getloadavg()
    _log(f"load average after: {meta['loadavg_after']}")
    merged = {level: _merge(rs) for level, rs in results.items()}
    host = merged.pop("host")
    report: dict[str, Any] = {
        "meta": meta,
        "config": {
            **common,
            "quick": args.quick,
            "cap_blas": args.cap_blas,
            "passes": passes,
            "targets": TARGETS,
            "reference_level": REFERENCE_LEVEL,
        },
        "levels": {**skipped, **merged},
        "host": host,
    }
    for r in [*merged.values(), host]:
        if "error" in r:
            _log(f"the {r.get('level')} worker failed:\n{textwrap.indent(r['error'], '    ')}")
    return publish(report, render(report), args.json, _log)


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "--worker" and sys.argv[2] == "--config":
        _worker_main(json.loads(sys.argv[3]))
    else:
        sys.exit(main())
