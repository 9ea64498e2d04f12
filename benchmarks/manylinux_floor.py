#!/usr/bin/env python3
"""Steady state of the manylinux_2_28 artifacts (the default floor) against the host-linked
ones (``manylinux = "host"``, the behaviour before the floor), on example_pkg.

Usage (from the repository root, with the dev venv)::

    .venv/bin/python benchmarks/manylinux_floor.py [--quick] [--json OUT] [--workdir DIR]

Method: example_pkg's sources are compiled twice for ``cpu-avx2`` with the build's child
process (``python -m aot_build.compile``), once with ``AOT_BUILD_MANYLINUX=host`` and once with
``2_28``, as two packages of their own names (``floor_host``, ``floor_228``; the sources import
only relatively), so that one process holds both and times them interleaved: same process,
same threads, same cache state. Each library's needs are read first (the host one must need
more than manylinux_2_28, the 2_28 one no more). Workers (fresh interpreters, ``--passes``,
default 3) run under ``torch.no_grad()`` with ``AOT_BUILD_STRICT=1``; per entry, both compiled
results must equal ``entry.__wrapped__`` (``torch.allclose``), then eager, host and 2_28 calls
are timed in rotated order, ``--rounds`` rounds of ``--loop-ms`` loops each.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
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
    interleaved,
    logger,
    number,
    run_meta,
    same_result,
)

HERE = Path(__file__).resolve()
MARK = "@@MANYLINUX_FLOOR_RESULT@@"
SOURCES = REPO / "example_pkg" / "example_pkg"
FLOORS = {"floor_host": "host", "floor_228": "2_28"}
ENTRIES = ("mlp_block", "attention_block", "normalize", "split_heads_stats")
BATCH = 16


def _worker(cfg: dict[str, Any]) -> dict[str, Any]:
    import importlib

    import torch

    for site in cfg["sites"].values():
        sys.path.insert(0, site)
    pkgs = {name: importlib.import_module(name) for name in FLOORS}
    out: dict[str, Any] = {"threads": torch.get_num_threads(), "entries": {}}
    with torch.no_grad():
        for entry_name in ENTRIES:
            torch.manual_seed(1234)
            entries = {name: getattr(pkg, entry_name) for name, pkg in pkgs.items()}
            args = tuple(entries["floor_host"].example_sets()[0])
            if entry_name in ("mlp_block", "attention_block"):
                args = (torch.randn(BATCH, *args[0].shape[1:]), *args[1:])
            eager = entries["floor_host"].__wrapped__
            fns: dict[str, Callable[[], object]] = {"eager": functools.partial(eager, *args)}
            for name, entry in entries.items():
                if not same_result(torch, entry(*args), eager(*args)):
                    raise RuntimeError(f"{name}.{entry_name}: compiled result differs from eager")
                fns[FLOORS[name]] = functools.partial(entry, *args)
            for f in fns.values():
                for _ in range(cfg["warmup"]):
                    f()
            out["entries"][entry_name] = interleaved(fns, cfg["rounds"], cfg["loop_ms"])["median_us"]
    return out


def _worker_main(cfg: dict[str, Any]) -> None:
    try:
        res = _worker(cfg)
    except Exception as exc:
        res = {"error": error_text(exc)}
    emit_result(MARK, res)


def _spawn(cfg: dict[str, Any], work: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AOT_BUILD", "TORCHINDUCTOR"))}
    env.update(AOT_BUILD_STRICT="1", TORCHINDUCTOR_CACHE_DIR=str(work / "inductor-cache"))
    proc = subprocess.run(
        [sys.executable, str(HERE), "--worker", json.dumps(cfg)],
        cwd=work,
        env=env,
        text=True,
        capture_output=True,
        timeout=900,
    )
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(MARK)), None)
    if line is None:
        raise RuntimeError(f"worker exited {proc.returncode} without a result:\n{proc.stderr[-3000:]}")
    res: dict[str, Any] = json.loads(line[len(MARK) :])
    if "error" in res:
        raise RuntimeError(res["error"])
    return res


def _needs(site: Path) -> dict[str, str]:
    """Per library of a build: the tag its symbol versions need (aot_build's reading)."""
    from aot_build.native.elf import read_dynamic
    from aot_build.native.platform_tag import platform_tag

    torch_libs = {"libtorch_cpu.so", "libgomp.so.1", "libc10.so"}
    libs = sorted(site.rglob("_aot_build/*.so"))
    return {lib.name: platform_tag([read_dynamic(lib)], torch_libs) for lib in libs}


def render(report: dict[str, Any]) -> str:
    rows = [
        "| entry | eager | host-linked (manylinux_2_35) | manylinux_2_28 | **2_28 / host** |",
        "|---|---|---|---|---|",
    ]
    for name in ENTRIES:
        per = [p["entries"][name] for p in report["passes"]]
        med = {k: statistics.median(p[k] for p in per) for k in ("eager", "host", "2_28")}
        rows.append(
            f"| `{name}` | {number(med['eager'])} | {number(med['host'])} | {number(med['2_28'])} | "
            f"{med['2_28'] / med['host']:.3f}× |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="1 pass, 5 rounds of 20 ms")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--json", type=Path, help="write the raw numbers here")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/bench-scratch/manylinux-floor"))
    a = p.parse_args(argv)
    if a.worker:
        _worker_main(json.loads(a.worker))
        return 0
    log = logger("manylinux_floor")
    meta = run_meta("aot_build", "example_pkg")
    work = a.workdir
    work.mkdir(parents=True, exist_ok=True)
    files = {f.name: f.read_text(encoding="utf-8") for f in sorted(SOURCES.glob("*.py"))}
    sites: dict[str, str] = {}
    needs: dict[str, dict[str, str]] = {}
    for name, floor in FLOORS.items():
        os.environ["AOT_BUILD_MANYLINUX"] = floor
        site = build_package(name, files, ["cpu-avx2"], work, f"{compile_side_hash()}-{floor}", False)
        sites[name] = str(site)
        needs[floor] = _needs(site)
        log(f"{name}: {needs[floor]}")
    os.environ.pop("AOT_BUILD_MANYLINUX", None)
    cfg = {"sites": sites, "warmup": 20, "rounds": 5 if a.quick else 15, "loop_ms": 20 if a.quick else 50}
    passes = []
    for i in range(1 if a.quick else a.passes):
        t = time.perf_counter()
        passes.append(_spawn(cfg, work))
        log(f"pass {i + 1}: {time.perf_counter() - t:.1f} s")
    meta["loadavg_after"] = os.getloadavg()
    report = {"meta": meta, "needs": needs, "config": cfg, "passes": passes}
    if a.json:
        a.json.write_text(json.dumps(report, indent=1))
    print(render(report))
    print(json.dumps(report["meta"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
