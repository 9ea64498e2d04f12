#!/usr/bin/env python3
"""The guard check alone, on real models: aot_build's C evaluator against an earlier revision
of it and against torch.compile's own guard check of the same function. Nothing is compiled
by Inductor, so a run takes about a minute.

Usage (from the repository root, with the dev venv)::

    .venv/bin/python benchmarks/guard_eval.py [--against REV] [--models bert,lstm] [--rounds N]

Method. The models are :mod:`guard_cost`'s (random weights from small configs; the UNet only
where diffusers is installed). For each model a fresh worker process imports the package
:func:`guard_cost.package_files` writes, captures the entry's guard tree as the build does
(``aot_build.guards.capture``, weights as ``weight`` checks), binds it twice, once with the
evaluator compiled from this checkout's ``_evaluator.c`` and once with ``--against REV``'s
(default ``HEAD~1``), and checks the unchanged state: after the first passing walk every call
takes the snapshot's fast path, re-reading only the volatile nodes. torch.compile is the
function under ``torch.compile(backend="eager")``, called once; its guard manager's
``check(f_locals)`` is timed the same way. Contenders alternate in rounds; medians (µs per
check), and each evaluator's stamps and volatile entries.

Run nothing else on the machine meanwhile; the load average before and after is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _bench import REPO, emit_result, interleaved, logger, number
from guard_cost import MODELS, PACKAGE, package_files

HERE = Path(__file__).resolve()
RESULT_MARK = "@@GUARD_EVAL_RESULT@@"
log = logger("guard_eval")


def _compile(source: str, out: Path) -> str:
    """The evaluator compiled from ``source`` (C text) into ``out``; the library's path."""
    from aot_build.guards import native

    out.mkdir(parents=True)
    src = out / "_evaluator.c"
    src.write_text(source, encoding="utf-8")
    return str(native.build(out, source=src))


def _worker(cfg: dict[str, Any]) -> None:
    import importlib

    import torch

    from aot_build.compile.specs import tensor_spec
    from aot_build.guards import native
    from aot_build.guards.bound import BoundState
    from aot_build.guards.capture import capture
    from aot_build.guards.checks import Check

    torch.set_grad_enabled(False)  # as the shim's benchmarks call; torch.compile guards on it
    sys.path.insert(0, cfg["site"])
    mod = importlib.import_module(f"{PACKAGE}.models")
    name = cfg["model"]
    entry = getattr(mod, name)
    fn = entry.__wrapped__
    torch.manual_seed(1234)
    args = tuple(mod.EXAMPLES[name])
    captured = capture(fn, None, args, f"{PACKAGE}.models:{name}")
    builder = captured.builder
    builder.weights = [tensor_spec(t) for _, t in captured.weights]
    for i, (paths, _) in enumerate(captured.weights):
        for path in paths:
            builder.add(path, Check("weight", i))
    tree = builder.tree()
    fns: dict[str, Any] = {}
    stats: dict[str, Any] = {}
    for side, library in cfg["evaluators"].items():
        state = BoundState(tree, fn, native.load(Path(library)))
        weights = tuple(state.gather(None))
        assert state.check(None, weights) == -1 and state.check(None, weights) == -1, side
        fns[side] = lambda state=state, weights=weights: state.check(None, weights)
        stats[side] = state._native.stats()  # type: ignore[union-attr]
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="eager")
    compiled(*args)
    entries = torch._dynamo.eval_frame._debug_get_cache_entry_list(fn.__code__)
    if len(entries) == 1:  # else Dynamo kept no single frame for it (a graph break): no figure
        manager = entries[0].guard_manager
        f_locals = dict(zip(fn.__code__.co_varnames, args, strict=False))
        assert manager.check(f_locals), "torch.compile's guards fail on the very call they were made for"
        fns["torch.compile"] = lambda: manager.check(f_locals)
    for f in fns.values():  # warm up
        for _ in range(200):
            f()
    timing = interleaved(fns, cfg["rounds"], 20.0)
    emit_result(
        RESULT_MARK,
        {"model": name, "guards": len(tree.nodes), "median_us": timing["median_us"], "stats": stats},
    )


def _run_worker(cfg: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(HERE), "--worker", json.dumps(cfg)],
        capture_output=True,
        text=True,
        cwd=cfg["work"],
        timeout=900,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK) :])  # type: ignore[no-any-return]
    return {"model": cfg["model"], "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}


def _source_at(rev: str) -> str:
    return subprocess.run(
        ["git", "show", f"{rev}:aot_build/guards/_evaluator.c"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="HEAD~1", help="the git revision whose evaluator to compare")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    a = parser.parse_args()
    if a.worker:
        _worker(json.loads(a.worker))
        return 0
    sources = {
        "this": (REPO / "aot_build" / "guards" / "_evaluator.c").read_text(encoding="utf-8"),
        a.against: _source_at(a.against),
    }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    log(f"commit {commit.stdout.strip()}, against {a.against}; load {os.getloadavg()[0]:.2f}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="guard-eval-") as tmp:
        evaluators = {
            side: _compile(text, Path(tmp) / "evaluators" / str(i))
            for i, (side, text) in enumerate(sources.items())
        }
        site = Path(tmp) / "site" / PACKAGE
        site.mkdir(parents=True)
        models = [m for m in a.models.split(",") if m]
        for rel, text in package_files(models).items():
            (site / rel).write_text(text, encoding="utf-8")
        for model in models:
            work = Path(tmp) / model
            work.mkdir()
            cfg = {
                "model": model,
                "site": str(site.parent),
                "work": str(work),
                "evaluators": evaluators,
                "rounds": a.rounds,
            }
            rows.append(_run_worker(cfg))
            log(json.dumps(rows[-1]))
    log(f"load after {os.getloadavg()[0]:.2f}")
    sides = [*sources, "torch.compile"]
    print(f"| model | guard nodes | {' | '.join(f'{s} (µs)' for s in sides)} | stamps / volatile |")
    print(f"|---|---|{'---|' * len(sides)}---|")
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | failed: {' '.join(r['error'])} |")
            continue
        med, st = r["median_us"], r["stats"]
        counts = " → ".join(f"{st[s]['stamps']} / {st[s]['volatile']}" for s in reversed(list(sources)))
        cells = " | ".join(number(med[s]) if s in med else "—" for s in sides)
        print(f"| {r['model']} | {r['guards']:,} | {cells} | {counts} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
