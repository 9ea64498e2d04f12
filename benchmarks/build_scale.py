"""Build at scale: cold build with 1 and with N compile workers, no-change rebuild, and
one-entry-changed rebuild of example_pkg for three CPU targets, through ``python -m build``
(and, with ``--bazel``, through the Bazel rules in ``rules/``: cold, then warm from a disk
cache after ``bazel clean``).

Each build is a real ``python -m build --wheel --no-isolation`` of a fresh copy of example_pkg
(no isolated environment to create, so the figures are aot-build's own), timed from outside;
the compile counts come from the build's own summary line.

    python benchmarks/build_scale.py [--repeat N] [--bazel] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _bench import REPO, logger, number, run_meta

TARGETS = "cpu-avx512,cpu-avx2,cpu-baseline"
log = logger("build-scale")


def _build(src: Path, out: Path, cache: Path, jobs: int) -> dict[str, Any]:
    env = dict(
        os.environ,
        AOT_BUILD_TARGETS=TARGETS,
        AOT_BUILD_CACHE_DIR=str(cache),
        AOT_BUILD_JOBS=str(jobs),
        SOURCE_DATE_EPOCH="1700000000",
        TORCHINDUCTOR_CACHE_DIR=str(out.parent / "inductor"),
    )
    for k in ("AOT_BUILD_STRICT", "AOT_BUILD_DISABLE"):
        env.pop(k, None)
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), "."],
        cwd=src,
        env=env,
        text=True,
        capture_output=True,
    )
    wall = time.perf_counter() - t0
    text = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"build failed:\n{text[-4000:]}")
    m = re.search(r"(\d+) hit\(s\), (\d+) compiled", text)
    done = re.search(r"aot-build: done in ([\d.]+) s", text)
    return {
        "wall_s": wall,
        "aot_s": float(done.group(1)) if done else None,
        "hits": int(m.group(1)) if m else None,
        "compiled": int(m.group(2)) if m else None,
        "wheel": next(out.glob("*.whl")).name,
    }


def _bazel(work: Path, disk: Path, clean: bool) -> dict[str, Any]:
    """``bazel build //:wheel`` in a copy of rules/example (see rules/README.md)."""
    ws = work / "rules" / "example"
    if not ws.exists():
        shutil.copytree(
            REPO / "rules", work / "rules", ignore=shutil.ignore_patterns("bazel-*", "user.bazelrc")
        )
        shutil.copytree(
            REPO / "example_pkg",
            work / "example_pkg",
            ignore=shutil.ignore_patterns("dist", "build", "*.egg-info"),
        )
    root = ["bazel", f"--output_user_root={work / 'bazel-root'}", "--nohome_rc"]
    if clean:
        subprocess.run([*root, "clean"], cwd=ws, capture_output=True)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [*root, "build", "//:wheel", f"--repo_env=AOT_BUILD_PYTHON={sys.executable}", f"--disk_cache={disk}"],
        cwd=ws,
        text=True,
        capture_output=True,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"bazel build failed:\n{(proc.stdout + proc.stderr)[-4000:]}")
    text = proc.stdout + proc.stderr
    procs = re.search(r"INFO: (\d+) process(?:es)?[:.][^\n]*", text)
    return {"wall_s": wall, "processes": procs.group(0) if procs else "?"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each scenario (medians reported)")
    ap.add_argument("--bazel", action="store_true", help="also build through rules/example with Bazel")
    ap.add_argument("--json", type=Path, help="write the raw results here")
    args = ap.parse_args()
    meta = run_meta("aot_build", "rules", "example_pkg")
    results: dict[str, list[dict[str, Any]]] = {}
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="build-scale-") as tmp:
        work = Path(tmp)
        for i in range(args.repeat):
            for jobs in (1, cores):
                src = work / f"src-{i}-{jobs}"
                shutil.copytree(
                    REPO / "example_pkg", src, ignore=shutil.ignore_patterns("dist", "build", "*.egg-info")
                )
                cache = work / f"cache-{i}-{jobs}"
                log(f"run {i + 1}: cold build, jobs={jobs}")
                results.setdefault(f"cold, jobs={jobs}", []).append(_build(src, work / "out", cache, jobs))
            # rebuilds from the jobs=cores build's cache
            log(f"run {i + 1}: no-change rebuild")
            results.setdefault("no-change rebuild", []).append(_build(src, work / "out", cache, cores))
            pre = src / "example_pkg" / "preprocess.py"
            text = pre.read_text()
            pre.write_text(text.replace("return (images - mean) / std", "return (images - mean) / std * 2.0"))
            if pre.read_text() == text:
                raise SystemExit("could not change the normalize entry (preprocess.py changed?)")
            log(f"run {i + 1}: one entry changed")
            results.setdefault("one entry changed", []).append(_build(src, work / "out", cache, cores))
            if args.bazel:
                disk = work / f"disk-{i}"
                log(f"run {i + 1}: bazel cold")
                results.setdefault("bazel cold", []).append(_bazel(work / f"bz-{i}", disk, clean=False))
                log(f"run {i + 1}: bazel after clean, warm disk cache")
                results.setdefault("bazel warm disk cache", []).append(
                    _bazel(work / f"bz-{i}", disk, clean=True)
                )
        for root in work.glob("bz-*/bazel-root"):
            subprocess.run(
                ["bazel", f"--output_user_root={root}", "--nohome_rc", "shutdown"],
                cwd=root.parent / "rules" / "example",
                capture_output=True,
            )
    meta["loadavg_after"] = os.getloadavg()
    cold = statistics.median(r["wall_s"] for r in results["cold, jobs=1"])
    print(
        f"- Date: {meta['date']}\n- Machine: `{meta['cpu']}` ({meta['nproc']} CPUs), `{meta['platform']}`; "
        f"Python {meta['python']}, torch {meta['torch']}\n- Code: git HEAD `{meta['git_head']}`"
        f"{' (uncommitted changes)' if meta['git_dirty_paths'] else ''}\n- Command: `{meta['command']}`\n"
        f"- Load average before: {', '.join(f'{x:.2f}' for x in meta['loadavg_before'])}; after: "
        f"{', '.join(f'{x:.2f}' for x in meta['loadavg_after'])}\n- Targets: {TARGETS}; runs per scenario: "
        f"{args.repeat} (medians)\n"
    )
    print("| scenario | wall (s) | aot-build part (s) | compiled | from cache | vs cold jobs=1 |")
    print("|---|---|---|---|---|---|")
    for name, rs in results.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        aot = [r["aot_s"] for r in rs if r.get("aot_s") is not None]
        print(
            f"| {name} | {number(wall)} | {number(statistics.median(aot)) if aot else '—'} | "
            f"{rs[-1].get('compiled', rs[-1].get('processes', '—'))} | {rs[-1].get('hits', '—')} | "
            f"{wall / cold:.2f}× |"
        )
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
