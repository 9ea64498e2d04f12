#!/usr/bin/env python3
"""The ``dynamo`` compile backend (upstream precompile: ``torch.compile(fullgraph=True)
.aot_compile``, loaded with Inductor compiling the saved C++ source) against the default
``aoti`` backend (torch.export + AOTInductor, shipped as binaries), on example_pkg.

Usage (from the repository root, with the dev venv)::

    .venv/bin/python benchmarks/backends.py [--quick] [--cold-entries a,b] [--json OUT]
    .venv/bin/python benchmarks/backends.py --render OUT     # the tables of a --json file

Setup (cached under ``--workdir``, default ``benchmarks/.work/backends``): example_pkg built
twice with ``python -m build --wheel --no-isolation`` and ``AOT_BUILD_TARGETS`` (``--targets``,
default ``cpu-avx2``): once as is (backend ``aoti``), once from a copy whose pyproject.toml adds
``backend = "dynamo"`` to ``[tool.aot-build]``. The copy's package is renamed ``example_pkg_dynamo``
(distribution ``example-pkg-dynamo``), nothing else changed, so that both wheels install into
one venv (with ``torch==<exact release>`` and the aot-build wheel) and can be timed in one
process.

Measurements, in fresh processes of the bench venv's interpreter (neutral working directory,
``AOT_BUILD_STRICT=1``: a fallback to Python is an error, never a number; calls under
``torch.no_grad()`` on the entry's first example-input set, seeded; results compared with
``entry.__wrapped__``):

* cold start, round-robin over approaches: from just before ``import torch`` to the first
  result. eager; aoti with ``PATH=<venv>/bin`` only (no compiler); dynamo with a compiler on
  PATH and an empty ``TORCHINDUCTOR_CACHE_DIR``; dynamo with a warm Inductor cache (filled by
  one untimed process beforehand); dynamo without a compiler on PATH (expected to fail);
* steady state, one process: for every entry both backends built, aoti, dynamo and eager in
  interleaved rounds (order rotated), medians of µs per call.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _bench import (
    REPO,
    add_build_options,
    dispatch,
    emit_result,
    error_text,
    first_line,
    interleaved,
    logger,
    number,
    publish,
    rendered,
    run_meta,
    same_result,
)
from cold_start import _med, _torch_release
from training import aot_build_wheel, bench_venv, project_wheel, spawn, uptime

HERE = Path(__file__).resolve()
RESULT_MARK = "@@BACKENDS_RESULT@@"
SOURCE = REPO / "example_pkg"
PACKAGES = {"aoti": "example_pkg", "dynamo": "example_pkg_dynamo"}
ENTRIES = ("mlp_block", "attention_block", "normalize", "split_heads_stats")
#: Cold-start approaches, in table order: (label, backend or None for eager, compiler on PATH,
#: Inductor cache: "empty" or "warm").
COLD: dict[str, tuple[str, str | None, bool, str]] = {
    "eager": ("eager (`entry.__wrapped__`)", None, True, "empty"),
    "aoti": ("aoti wheel, no compiler on PATH", "aoti", False, "empty"),
    "dynamo_cold": ("dynamo wheel, empty Inductor cache", "dynamo", True, "empty"),
    "dynamo_warm": ("dynamo wheel, warm Inductor cache", "dynamo", True, "warm"),
    "dynamo_nocc": ("dynamo wheel, no compiler on PATH", "dynamo", False, "empty"),
}

# --------------------------------------------------------------------------------------------
# Worker side: runs inside the bench venv. Standard library at module level only.
# --------------------------------------------------------------------------------------------


def _inputs(torch: Any, entry: Any) -> tuple[Any, ...]:
    torch.manual_seed(1234)
    return tuple(entry.example_sets()[0])


def _w_cold(cfg: dict[str, Any]) -> dict[str, Any]:
    pc = time.perf_counter
    t0 = pc()
    import torch

    t1 = pc()
    import importlib

    pkg = importlib.import_module(cfg["package"])
    t2 = pc()
    entry = getattr(pkg, cfg["entry"])
    fn = entry.__wrapped__ if cfg["eager"] else entry
    args = _inputs(torch, entry)
    with torch.no_grad():
        t3 = pc()
        out = fn(*args)
        t4 = pc()
        fn(*args)
        t5 = pc()
        inductor = "torch._inductor" in sys.modules
        if not same_result(torch, out, entry.__wrapped__(*args)):
            raise AssertionError(f"{entry.key}: the first result differs from entry.__wrapped__'s")
    return {
        "import_torch_ms": (t1 - t0) * 1e3,
        "import_pkg_ms": (t2 - t1) * 1e3,
        "first_call_ms": (t4 - t3) * 1e3,
        "second_call_ms": (t5 - t4) * 1e3,
        "import_to_first_ms": (t4 - t0) * 1e3,
        "after_torch_ms": (t4 - t1) * 1e3,
        "loaded_target": None if cfg["eager"] else entry.loaded_target(),
        "inductor_imported": inductor,
    }


def _w_steady(cfg: dict[str, Any]) -> dict[str, Any]:
    import functools
    import importlib

    import torch

    pkgs = {backend: importlib.import_module(name) for backend, name in PACKAGES.items()}
    out: dict[str, Any] = {"num_threads": torch.get_num_threads(), "entries": {}}
    with torch.no_grad():
        for name in cfg["entries"]:
            try:
                aoti = getattr(pkgs["aoti"], name)
                args = _inputs(torch, aoti)
                fns: dict[str, Callable[[], object]] = {
                    "eager": functools.partial(aoti.__wrapped__, *args),
                    "aoti": functools.partial(aoti, *args),
                    "dynamo": functools.partial(getattr(pkgs["dynamo"], name), *args),
                }
                want = fns["eager"]()
                for backend in ("aoti", "dynamo"):
                    if not same_result(torch, fns[backend](), want):
                        raise AssertionError(f"{name}: the {backend} result differs from entry.__wrapped__'s")
                for f in fns.values():
                    for _ in range(cfg["warmup"]):
                        f()
                timing = interleaved(fns, cfg["rounds"], cfg["loop_ms"])
                per = timing["per_call_us"]
                timing["ratio_vs_eager"] = {
                    k: statistics.median(x / y for x, y in zip(v, per["eager"], strict=True))
                    for k, v in per.items()
                }
                timing["dynamo_vs_aoti"] = statistics.median(
                    x / y for x, y in zip(per["dynamo"], per["aoti"], strict=True)
                )
                timing["loaded"] = {r: getattr(pkgs[r], name).loaded_target() for r in PACKAGES}
                out["entries"][name] = timing
            except Exception as exc:
                out["entries"][name] = {"error": error_text(exc)}
    return out


def _worker(mode: str, cfg: dict[str, Any]) -> None:
    try:
        res = _w_cold(cfg) if mode == "cold" else _w_steady(cfg)
    except Exception as exc:
        res = {"mode": mode, "error": error_text(exc)}
    emit_result(RESULT_MARK, res)


# --------------------------------------------------------------------------------------------
# Driver side
# --------------------------------------------------------------------------------------------


_log = logger("backends")


def _dynamo_copy(dest: Path) -> list[Path]:
    """example_pkg's project with ``backend = "dynamo"`` and the package renamed; its items."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(
        SOURCE / PACKAGES["aoti"],
        dest / PACKAGES["dynamo"],
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "_aot_build"),
    )
    text = (SOURCE / "pyproject.toml").read_text()
    if 'name = "example-pkg"' not in text or "[tool.aot-build]\n" not in text:
        raise SystemExit("example_pkg/pyproject.toml changed shape; update backends.py's copy")
    text = text.replace('name = "example-pkg"', 'name = "example-pkg-dynamo"')
    text = text.replace("[tool.aot-build]\n", '[tool.aot-build]\nrule = "dynamo"\n')
    (dest / "pyproject.toml").write_text(text)
    return [dest / "pyproject.toml", dest / PACKAGES["dynamo"]]


def _wheel_facts(wheel: Path, package: str) -> dict[str, Any]:
    """Size, artifacts per entry (role, backend) and their bytes, from the wheel itself (its
    manifest read by aot_build's reader)."""
    from aot_build.manifest import Manifest

    folder = f"{package}/_aot_build/"
    with zipfile.ZipFile(wheel) as zf:
        where = f"{wheel}!{folder}manifest.json"
        raw = json.loads(zf.read(f"{folder}manifest.json"))
        manifest = Manifest.from_dict(raw, where, folder=zipfile.Path(zf, folder))
        sizes = {i.filename: i.file_size for i in zf.infolist()}
    entries: dict[str, Any] = {}
    for key, e in manifest.entries.items():
        arts = [a for v in e.variants for a in v.artifacts]
        entries[key.split(":")[-1]] = {
            "variants": len(e.variants),
            "artifacts": sorted({f"{a.role}/{a.backend}" for a in arts}),
            "targets": sorted({a.target for a in arts}),
        }
    art_bytes = sum(
        n for f, n in sizes.items() if f.startswith(f"{package}/_aot_build/") and "manifest" not in f
    )
    return {
        "wheel_bytes": wheel.stat().st_size,
        "artifact_bytes": art_bytes,
        "entries": entries,
        "skipped_targets": manifest.skipped_targets,
    }


def _setup(args: argparse.Namespace, work: Path) -> tuple[Path, dict[str, Any]]:
    aot = aot_build_wheel(work, args.build_python)
    salt = (work / "aot_build.stamp").read_text()
    aoti_items = [SOURCE / "pyproject.toml", SOURCE / PACKAGES["aoti"]]
    dyn_items = _dynamo_copy(work / "gen" / "example_pkg_dynamo")
    wheels = {
        "aoti": project_wheel("example_pkg", aoti_items, work, args.build_python, args.targets, salt),
        "dynamo": project_wheel("example_pkg_dynamo", dyn_items, work, args.build_python, args.targets, salt),
    }
    vpy = bench_venv(work / "venv", [aot, *wheels.values()], args.torch)
    info: dict[str, Any] = {"venv": str(vpy.parent.parent), "aot_build_wheel": str(aot)}
    for backend, wheel in wheels.items():
        info[backend] = {"wheel": str(wheel), **_wheel_facts(wheel, PACKAGES[backend])}
    return vpy, info


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    out: dict[str, Any] = {"runs": len(runs), "ok": len(ok)}
    for k in ("import_torch_ms", "import_pkg_ms", "first_call_ms", "second_call_ms"):
        out[k] = _med([r[k] for r in ok])
    out["import_to_first_ms"] = _med([r["import_to_first_ms"] for r in ok])
    out["after_torch_ms"] = _med([r["after_torch_ms"] for r in ok])
    out["loaded"] = sorted({str(r["loaded_target"]) for r in ok})
    out["inductor"] = sorted({r["inductor_imported"] for r in ok})
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        out["error"] = errors[0]
    return out


def render(report: dict[str, Any]) -> str:
    m, c, s = report["meta"], report["config"], report["setup"]
    out = [
        "### Run",
        "",
        f"- Date: {m['date']}",
        f"- Machine: `{m['cpu']}` ({m['nproc']} CPUs), `{m['platform']}`; Python {m['python']}, "
        f"torch {m['torch']}, "
        + (f"`OMP_NUM_THREADS={c['threads']}`" if c.get("threads") else "torch's default threads"),
        f"- Code: git HEAD `{m['git_head']}`"
        + (f", uncommitted changes: {', '.join(m['git_dirty_paths'])}" if m["git_dirty_paths"] else "")
        + f"; both wheels built for `{c['targets']}`",
        f"- Command: `{m['command']}`",
        f"- Load (`uptime`): before `{m['uptime_before']}`; after `{m['uptime_after']}`",
        "",
        "#### The two wheels",
        "",
        "| backend | wheel (KB) | artifacts (KB) | entries: variants, artifacts (role/backend) |",
        "|---|---|---|---|",
    ]
    for backend in PACKAGES:
        w = s[backend]
        ents = "; ".join(
            f"`{k}` {e['variants']}, {', '.join(e['artifacts']) or '—'}" for k, e in w["entries"].items()
        )
        out.append(
            f"| {backend} | {number(w['wheel_bytes'] / 1e3)} | {number(w['artifact_bytes'] / 1e3)} | {ents} |"
        )
    out += [
        "",
        f"#### Cold start: import → first result (ms, medians; fresh process per run; {c['runs']} "
        f"runs, dynamo {c['slow_runs']})",
        "",
        "| entry | approach | runs ok | import torch+pkg | first call | **import→first result** | "
        "same, after `import torch` | 2nd call | loaded | `torch._inductor` imported |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, per in report["cold"].items():
        for mode, (label, *_rest) in COLD.items():
            if mode not in per:
                continue
            x = _summary(per[mode])
            imp = None if x["import_torch_ms"] is None else x["import_torch_ms"] + x["import_pkg_ms"]
            out.append(
                f"| `{name}` | {label} | {x['ok']}/{x['runs']} | {number(imp)} | "
                f"{number(x['first_call_ms'])} | **{number(x['import_to_first_ms'])}** | "
                f"{number(x['after_torch_ms'])} | "
                f"{number(x['second_call_ms'], 2)} | {', '.join(x['loaded']) or '—'} | "
                f"{', '.join(map(str, x['inductor'])) or '—'} |"
            )
            if x.get("error"):
                out.append(f"| | `{mode}` failed: `{first_line(x['error'])}` |" + " |" * 8)
    st = report.get("steady")
    if st:
        out += [
            "",
            f"#### Steady state (µs per call, median of {c['rounds']} interleaved rounds, order "
            "rotated, one process; ratios: median per-round ratio)",
            "",
            "| entry | eager | aoti | dynamo | aoti / eager | dynamo / eager | **dynamo / aoti** |",
            "|---|---|---|---|---|---|---|",
        ]
        if "error" in st:
            out.append(f"| failed: `{first_line(st['error'])}` |" + " |" * 6)
        for name, e in st.get("entries", {}).items():
            if "error" in e:
                out.append(f"| `{name}` | failed: `{first_line(e['error'])}` |" + " |" * 5)
                continue
            med, r = e["median_us"], e["ratio_vs_eager"]
            out.append(
                f"| `{name}` | {number(med['eager'])} | {number(med['aoti'])} | {number(med['dynamo'])} | "
                f"{r['aoti']:.2f}× | {r['dynamo']:.2f}× | **{e['dynamo_vs_aoti']:.2f}×** |"
            )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="smoke run: 1 run each, few rounds")
    p.add_argument("--cold-entries", default="attention_block,normalize", help="entries for cold start")
    p.add_argument("--entries", default=",".join(ENTRIES), help="entries for the steady state")
    p.add_argument("--modes", default=",".join(COLD), help="cold-start approaches: " + ",".join(COLD))
    p.add_argument("--runs", type=int, help="cold processes for eager and aoti (default 5)")
    p.add_argument("--slow-runs", type=int, help="cold processes per dynamo approach (default 3)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 21)")
    p.add_argument("--loop-ms", type=float, default=60.0, help="length of one timed loop")
    p.add_argument("--warmup", type=int, default=20, help="calls per contender before timing")
    p.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for the workers (0: default)")
    p.add_argument("--targets", default="cpu-avx2", help="AOT_BUILD_TARGETS for both builds")
    add_build_options(p, REPO / "benchmarks" / ".work" / "backends", _torch_release())
    args = p.parse_args(argv)
    if rendered(args, render):
        return 0
    modes = [x for x in args.modes.split(",") if x]
    if set(modes) - set(COLD):
        p.error(f"unknown modes {sorted(set(modes) - set(COLD))}")
    runs = args.runs or (1 if args.quick else 5)
    slow_runs = args.slow_runs or (1 if args.quick else 3)
    rounds = args.rounds or (3 if args.quick else 21)
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    vpy, info = _setup(args, work)
    meta = run_meta("aot_build", "example_pkg")
    meta["uptime_before"] = uptime()
    _log(f"load before: {meta['uptime_before']}")
    cold_entries = [x for x in args.cold_entries.split(",") if x]
    cold: dict[str, dict[str, list[dict[str, Any]]]] = {n: {m: [] for m in modes} for n in cold_entries}
    warm_caches: dict[str, Path] = {}
    if "dynamo_warm" in modes:
        for name in cold_entries:
            cache = work / "warm-cache" / name
            if cache.exists():
                shutil.rmtree(cache)
            _log(f"warming an Inductor cache for the dynamo {name} (untimed)")
            cfg = {"package": PACKAGES["dynamo"], "entry": name, "eager": False}
            r = spawn(
                HERE, RESULT_MARK, vpy, "cold", cfg, work, compiler=True, cache=cache, threads=args.threads
            )
            if "error" in r:
                _log(f"  failed: {first_line(r['error'])}")
            warm_caches[name] = cache
    todo = {mode: (slow_runs if COLD[mode][1] == "dynamo" else runs) for mode in modes}
    for i in range(max(todo.values(), default=0)):
        for name in cold_entries:
            for mode, n in todo.items():
                if i >= n:
                    continue
                _label, backend, compiler, cache = COLD[mode]
                cfg = {"package": PACKAGES[backend or "aoti"], "entry": name, "eager": backend is None}
                where = warm_caches.get(name) if cache == "warm" else None
                r = spawn(
                    HERE,
                    RESULT_MARK,
                    vpy,
                    "cold",
                    cfg,
                    work,
                    compiler=compiler,
                    cache=where,
                    threads=args.threads,
                )
                msg = first_line(r["error"]) if "error" in r else f"{r['import_to_first_ms']:,.0f} ms"
                _log(f"cold {i + 1}/{n} {name} {mode}: {msg}")
                cold[name][mode].append(r)
    steady_entries = [x for x in args.entries.split(",") if x]
    steady: dict[str, Any] = {}
    if steady_entries:
        _log(f"steady state: {', '.join(steady_entries)}")
        cfg = {"entries": steady_entries, "rounds": rounds, "loop_ms": args.loop_ms, "warmup": args.warmup}
        steady = spawn(HERE, RESULT_MARK, vpy, "steady", cfg, work, compiler=True, threads=args.threads)
    meta["uptime_after"] = uptime()
    _log(f"load after: {meta['uptime_after']}")
    report = {
        "meta": meta,
        "config": {
            "targets": args.targets,
            "runs": runs,
            "slow_runs": slow_runs,
            "rounds": rounds,
            "loop_ms": args.loop_ms,
            "warmup": args.warmup,
            "modes": modes,
            "threads": args.threads,
        },
        "setup": info,
        "cold": cold,
        "steady": steady,
    }
    return publish(report, render(report), args.json, _log)


if __name__ == "__main__":
    dispatch(_worker, main)
