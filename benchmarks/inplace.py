#!/usr/bin/env python3
"""Entries that update state in place, steady state: one decode step writing a static KV cache
at a position (``decode``), and one whole training step of an MLP with BatchNorm in train mode
(forward, ``torch.autograd.grad``, SGD update of the parameters in place; the running statistics
move) (``bn_step``); aot-build's compiled entry against eager (``entry.__wrapped__``) and
``torch.compile(entry.__wrapped__)``.

Usage (from the repository root, with the dev venv)::

    .venv/bin/python benchmarks/inplace.py [--rounds N] [--targets cpu-avx2] [--json OUT]

Setup: the benchmark-only package ``inplace_bench`` (written by this script) is compiled by the
build's own child process (``python -m aot_build.compile``, see ``_bench.build_package``),
cached under ``--workdir``. Each entry is measured in a fresh process (``AOT_BUILD_STRICT=1``:
a fallback to Python is an error, never a number; empty ``TORCHINDUCTOR_CACHE_DIR``): each
contender runs one step from the same state and its output and every buffer and parameter are
compared with eager's (``torch.allclose``), then all three are warmed up and timed in
interleaved rounds (order rotated); medians of µs per step.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
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
    run_meta,
)

log = logger("inplace")
MARK = "INPLACE-RESULT: "
ENTRIES = ("decode", "bn_step")

PACKAGE = '''
"""Benchmark entries that update state in place (written by benchmarks/inplace.py)."""

import torch
import torch.nn.functional as F

from aot_build import aot_entry

torch.manual_seed(0)
DIM, MAX_LEN = 256, 512
K_CACHE = torch.zeros(MAX_LEN, DIM)
V_CACHE = torch.zeros(MAX_LEN, DIM)
PROJ = torch.nn.Linear(DIM, 3 * DIM)
OUT = torch.nn.Linear(DIM, DIM)


@aot_entry(example_inputs=lambda: (torch.randn(1, DIM), torch.tensor([0])))
def decode(x, pos):
    """One decode step: key and value written into the caches at pos; attention over 0..pos."""
    q, k, v = PROJ(x).chunk(3, dim=-1)
    K_CACHE.index_copy_(0, pos, k)
    V_CACHE.index_copy_(0, pos, v)
    scores = (q @ K_CACHE.T) / DIM**0.5
    scores = scores.masked_fill(torch.arange(MAX_LEN) > pos, float("-inf"))
    return OUT(scores.softmax(-1) @ V_CACHE)


MLP = torch.nn.Sequential(
    torch.nn.Linear(DIM, 512), torch.nn.BatchNorm1d(512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
)
MLP.train()


@aot_entry(example_inputs=lambda: (torch.randn(64, DIM), torch.randint(0, 10, (64,)), 0.01))
def bn_step(x, target, lr):
    """A whole training step: BatchNorm in train mode, gradients, SGD update in place."""
    params = list(MLP.parameters())
    with torch.enable_grad():
        loss = F.cross_entropy(MLP(x), target)
        grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        for p, g in zip(params, grads):
            p.sub_(lr * g)
    return loss.detach()
'''


def _state(P: Any) -> dict[str, Any]:
    out = {"K_CACHE": P.K_CACHE, "V_CACHE": P.V_CACHE}
    for name in ("PROJ", "OUT", "MLP"):
        for k, v in getattr(P, name).state_dict(keep_vars=True).items():
            out[f"{name}.{k}"] = v
    return out


def worker(kind: str, config: dict[str, Any]) -> None:
    """One entry in this fresh process: correctness, then the interleaved rounds."""
    try:
        import inplace_bench as P
        import torch

        torch.manual_seed(1)
        name = config["entry"]
        entry = getattr(P, name)
        if name == "decode":
            positions = iter(range(10**9))
            x = torch.randn(1, 256)

            def args() -> tuple[Any, ...]:
                return (x, torch.tensor([next(positions) % 512]))
        else:
            batch = (torch.randn(64, 256), torch.randint(0, 10, (64,)), 0.01)

            def args() -> tuple[Any, ...]:
                return batch

        contenders = {
            "eager": entry.__wrapped__,
            "torch.compile": torch.compile(entry.__wrapped__),
            "aot-build": entry,
        }
        state = _state(P)
        with torch.no_grad():
            start = {k: v.detach().clone() for k, v in state.items()}
            fixed = args()
            results: dict[str, Any] = {}
            for k, fn in contenders.items():
                for key, v in state.items():
                    v.copy_(start[key])
                out = fn(*fixed)
                results[k] = (out.clone(), {key: v.detach().clone() for key, v in state.items()})
            want_out, want_state = results["eager"]
            for k, (out, st) in results.items():
                same = torch.allclose(out, want_out, rtol=1e-4, atol=1e-5) and all(
                    torch.allclose(st[key], want_state[key], rtol=1e-4, atol=1e-5) for key in st
                )
                if not same:
                    raise SystemExit(f"{k} differs from eager after one step of {name}")

            def timed(fn: Callable[..., Any]) -> Callable[[], object]:
                return lambda: fn(*args())

            fns = {k: timed(fn) for k, fn in contenders.items()}
            for fn in fns.values():  # warm-up (torch.compile compiles here)
                for _ in range(20):
                    fn()
            timing = interleaved(fns, config["rounds"], config["loop_ms"])
        emit_result(MARK, {"entry": name, **timing})
    except BaseException as exc:  # reported to the driver
        emit_result(MARK, {"error": error_text(exc)})


def _measure(site: Path, entry: str, rounds: int, loop_ms: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="inplace-bench-") as tmp:
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(site), str(REPO)]),
            AOT_BUILD_STRICT="1",
            TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "inductor"),
        )
        config = json.dumps({"entry": entry, "rounds": rounds, "loop_ms": loop_ms})
        proc = subprocess.run(
            [sys.executable, __file__, "--worker", "steady", "--config", config],
            cwd=tmp,
            env=env,
            text=True,
            capture_output=True,
        )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if not lines:
        raise SystemExit(f"the {entry} worker printed no result:\n{first_line(proc.stderr)}")
    result: dict[str, Any] = json.loads(lines[-1][len(MARK) :])
    if "error" in result:
        raise SystemExit(f"the {entry} worker failed:\n{result['error']}")
    return result


def render(report: dict[str, Any]) -> str:
    meta = report["meta"]
    lines = [
        f"- Date: {meta['date']}\n- Machine: `{meta['cpu']}` ({meta['nproc']} CPUs), `{meta['platform']}`; "
        f"Python {meta['python']}, torch {meta['torch']}\n- Code: git HEAD `{meta['git_head']}`"
        f"{' (uncommitted changes)' if meta['git_dirty_paths'] else ''}\n- Command: `{meta['command']}`\n"
        f"- Load average before: {', '.join(f'{x:.2f}' for x in meta['loadavg_before'])}; after: "
        f"{', '.join(f'{x:.2f}' for x in meta['loadavg_after'])}\n- Target: {report['targets']}; "
        f"{report['rounds']} interleaved rounds per entry (medians)\n",
        "| entry | eager (µs) | torch.compile (µs) | aot-build (µs) | vs eager | vs torch.compile |",
        "|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        m = r["median_us"]
        lines.append(
            f"| {r['entry']} | {number(m['eager'])} | {number(m['torch.compile'])} | "
            f"{number(m['aot-build'])} | "
            f"{m['eager'] / m['aot-build']:.2f}× faster | {m['torch.compile'] / m['aot-build']:.2f}× faster |"
        )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--loop-ms", type=float, default=50.0, help="length of one timed loop")
    ap.add_argument("--targets", default="cpu-avx2")
    ap.add_argument("--workdir", type=Path, default=REPO / "benchmarks" / ".work" / "inplace")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--json", type=Path, help="write the raw numbers here")
    args = ap.parse_args()
    meta = run_meta("aot_build", "benchmarks")
    targets = args.targets.split(",")
    site = build_package(
        "inplace_bench", {"__init__.py": PACKAGE}, targets, args.workdir, compile_side_hash(), args.rebuild
    )
    results = []
    for entry in ENTRIES:
        log(f"{entry}: steady state, fresh process")
        results.append(_measure(site, entry, args.rounds, args.loop_ms))
    meta["loadavg_after"] = os.getloadavg()
    report = {"meta": meta, "targets": args.targets, "rounds": args.rounds, "results": results}
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    dispatch(worker, main)
