#!/usr/bin/env python3
"""Cold-start benchmark: an installed aot-build wheel against eager, torch.compile, upstream
precompile (``aot_compile`` + ``load_compiled_function``) and an AOTInductor ``.pt2``.

Usage (from the repository root, with the dev venv)::

    .venv/bin/python benchmarks/cold_start.py [--runs N] [--slow-runs M] [--entry NAME] [--json OUT]

Setup (cached under ``--workdir``, default ``benchmarks/.work``; rebuilt when sources change):

* the aot-build wheel and example_pkg's wheel (``python -m build --wheel --no-isolation`` with
  this interpreter, from copies of the sources so the repository tree is not written to), or
  the example wheel given with ``--wheel``;
* a fresh venv with ``torch==<exact release>`` and both wheels;
* for the entry: an upstream precompile artifact and an AOTInductor ``.pt2`` (weights baked).

Every measurement runs in a fresh process with the bench venv's interpreter, in a neutral
working directory, with an empty ``TORCHINDUCTOR_CACHE_DIR``. The aot_build processes also get
``PATH=<venv>/bin`` only (no C++ compiler) and ``AOT_BUILD_STRICT=1`` (a fallback to Python
would be an error, not a silently different number).

The same file is the worker: ``--worker MODE --config JSON`` runs one measurement and prints
its result as one JSON line. It imports only the standard library at module level, so the
worker's timed section starts right before ``import torch``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from _bench import dispatch, emit_result, error_text, first_line, logger, number, publish

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve()
RESULT_MARK = "@@COLD_START_RESULT@@"
PACKAGE = "example_pkg"
#: Bump when _w_setup changes, so cached per-entry artifacts are rebuilt.
SETUP_VERSION = 3

#: Fresh-process approaches, in table order. "slow" ones get --slow-runs runs.
MODES: dict[str, dict[str, Any]] = {
    "eager": {"label": "eager (`entry.__wrapped__`)", "slow": False, "compiler": True},
    "compile": {"label": "torch.compile, cold cache", "slow": True, "compiler": True},
    "precompile": {
        "label": "upstream precompile (`load_compiled_function`)",
        "slow": True,
        "compiler": True,
    },
    "precompile_nocc": {
        "label": "upstream precompile, no compiler on PATH",
        "slow": True,
        "compiler": False,
    },
    "aoti_pt2": {"label": "AOTInductor .pt2 (`aoti_load_package`)", "slow": False, "compiler": True},
    "aoti_pt2_nocc": {
        "label": "AOTInductor .pt2, no compiler on PATH",
        "slow": False,
        "compiler": False,
    },
    "aot_build": {"label": "aot_build wheel (no compiler on PATH)", "slow": False, "compiler": False},
}
#: Modes that load the same callable as another one; left out of the interleaved run.
#: --threads (OMP_NUM_THREADS for every worker); 0 = leave torch's default.
THREADS = [0]
SAME_AS = {"precompile_nocc": "precompile", "aoti_pt2_nocc": "aoti_pt2"}


# --------------------------------------------------------------------------------------------
# Worker side: runs inside the bench venv. Standard library at module level only.
# --------------------------------------------------------------------------------------------


_err = error_text


def _inputs(torch: Any, entry: Any) -> tuple[Any, ...]:
    """The entry's own (first) example inputs, drawn with a fixed seed: the same in every process."""
    torch.manual_seed(1234)
    return tuple(entry.example_sets()[0])


def _checksum(torch: Any, out: Any) -> float:
    """Sum of every tensor in ``out`` (any nesting): a cheap cross-approach agreement check."""
    from torch.utils import _pytree as pytree

    total = 0.0
    for leaf in pytree.tree_leaves(out):
        if isinstance(leaf, torch.Tensor):
            total += float(leaf.double().sum())
    return total


def _steady(fn: Callable[[], Any], warmup: int, batches: int, min_batch_s: float) -> dict[str, Any]:
    """Per-call time after warm-up: ``batches`` batches of n calls (n calibrated so a batch takes
    at least ``min_batch_s``), per-call time of each batch, median over batches."""
    pc = time.perf_counter
    for _ in range(warmup):
        fn()
    n = 1
    while True:
        t = pc()
        for _ in range(n):
            fn()
        if pc() - t >= min_batch_s or n >= 1 << 16:
            break
        n *= 2
    per: list[float] = []
    for _ in range(batches):
        t = pc()
        for _ in range(n):
            fn()
        per.append((pc() - t) / n)
    return {
        "median_us": statistics.median(per) * 1e6,
        "min_us": min(per) * 1e6,
        "calls_per_batch": n,
        "batches": batches,
        "per_batch_us": [p * 1e6 for p in per],
    }


def _interleaved(fns: dict[str, Callable[[], Any]], rounds: int, min_batch_s: float) -> dict[str, Any]:
    """Alternating batches in one process: each round times one batch of n calls of every
    contender (order rotated each round), n sized on the slowest so a batch lasts at least
    ``min_batch_s``. Per-call medians over rounds. Callers warm the contenders up first."""
    pc = time.perf_counter
    names = list(fns)
    if not names:
        return {"calls_per_batch": 0, "rounds": 0, "per_call_us": {}, "median_us": {}}
    slowest = 0.0
    for name in names:
        t = pc()
        for _ in range(20):
            fns[name]()
        slowest = max(slowest, (pc() - t) / 20)
    n = max(1, int(min_batch_s / max(slowest, 1e-7)))
    per: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            f = fns[name]
            t = pc()
            for _ in range(n):
                f()
            per[name].append((pc() - t) / n * 1e6)
    return {
        "calls_per_batch": n,
        "rounds": rounds,
        "per_call_us": per,
        "median_us": {k: statistics.median(v) for k, v in per.items()},
    }


def _load_mode(mode: str, torch: Any, entry: Any, cfg: dict[str, Any]) -> Callable[..., Any]:
    """The callable ``mode`` measures. Loading cost is part of the caller's timed section."""
    fn = entry.__wrapped__
    if mode == "eager":
        return fn
    if mode == "compile":
        return torch.compile(fn)
    mode = SAME_AS.get(mode, mode)
    if mode == "precompile":
        # nn.Module globals cannot be pickled into the artifact; setup saved them as external
        # data (see _w_setup), and the loader hands the live objects back by the same keys.
        external = {name: fn.__globals__[name] for name in cfg.get("precompile_external", [])}
        with open(cfg["precompile_path"], "rb") as f:
            return torch.compiler.load_compiled_function(
                f, f_globals=fn.__globals__, external_data=external or None
            )
    if mode == "aoti_pt2":
        import torch._inductor

        return torch._inductor.aoti_load_package(cfg["pt2_path"])
    if mode == "aot_build":
        return entry
    raise ValueError(f"unknown mode {mode}")


def _w_measure(mode: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """One fresh-process measurement: import → load → first call → steady state."""
    pc = time.perf_counter
    res: dict[str, Any] = {"mode": mode}
    t0 = pc()
    import torch

    t_torch = pc()
    pkg = importlib.import_module(cfg["package"])
    entry = getattr(pkg, cfg["entry"])
    t_pkg = pc()
    inputs = _inputs(torch, entry)
    try:
        with torch.no_grad():
            t_load0 = pc()
            fn = _load_mode(mode, torch, entry, cfg)
            t_load = pc()
            out = fn(*inputs)
            t_first = pc()
            fn(*inputs)
            t_second = pc()
    except Exception as exc:
        res["error"] = _err(exc)
        return res
    res.update(
        import_torch_ms=(t_torch - t0) * 1e3,
        import_pkg_ms=(t_pkg - t_torch) * 1e3,
        load_ms=(t_load - t_load0) * 1e3,
        first_call_ms=(t_first - t_load) * 1e3,
        second_call_ms=(t_second - t_first) * 1e3,
        import_to_first_ms=(t_first - t0) * 1e3,
        checksum=_checksum(torch, out),
    )
    if mode == "aot_build":
        call = getattr(entry, "_call", None)
        res["bound_to_artifact"] = call is not None and call is not entry.__wrapped__
        res["compiler_on_path"] = {c: shutil.which(c) for c in ("cc", "c++", "gcc", "g++")}
    with torch.no_grad():
        res["steady"] = _steady(lambda: fn(*inputs), cfg["warmup"], cfg["batches"], cfg["min_batch_s"])
    res["num_threads"] = torch.get_num_threads()
    return res


class _Timed:
    """Proxy for an AOTI runner: records the duration of each ``run`` and its arguments."""

    def __init__(self, inner: Any, log: dict[str, Any]) -> None:
        self._inner = inner
        self._log = log

    def run(self, tensors: Any) -> Any:
        t = time.perf_counter()
        out = self._inner.run(tensors)
        self._log.setdefault("run_ms", []).append((time.perf_counter() - t) * 1e3)
        self._log.setdefault("raw_args", tensors)
        self._log.setdefault("raw_runner", self._inner)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _w_breakdown(cfg: dict[str, Any]) -> dict[str, Any]:
    """aot_build's first call taken apart, in one cold process (no compiler on PATH).

    Wraps the shim's module-level helpers (``manifest_for``, ``verify``, ``open_library``,
    ``host_cpu_targets``, ``bind``) with timers, then makes one ordinary call of the entry.
    """
    pc = time.perf_counter
    res: dict[str, Any] = {"mode": "breakdown"}
    t0 = pc()
    import torch

    t1 = pc()
    pkg = importlib.import_module(cfg["package"])
    entry = getattr(pkg, cfg["entry"])
    t2 = pc()
    shim = importlib.import_module("aot_build.load.shim")
    t3 = pc()
    res.update(import_torch_ms=(t1 - t0) * 1e3, import_pkg_ms=(t2 - t1) * 1e3, import_shim_ms=(t3 - t2) * 1e3)
    log: dict[str, Any] = {}
    missing: list[str] = []

    def timed(name: str, wrap_result: Callable[[Any], Any] | None = None) -> None:
        orig = getattr(shim, name, None)
        if orig is None:
            missing.append(name)
            return

        def wrapper(*a: Any, **k: Any) -> Any:
            t = pc()
            try:
                out = orig(*a, **k)
            finally:
                log.setdefault(f"{name}_ms", []).append((pc() - t) * 1e3)
            return wrap_result(out) if wrap_result else out

        setattr(shim, name, wrapper)

    timed("manifest_for")
    timed("verify")
    timed("host_cpu_targets")
    timed("open_library", lambda r: _Timed(r, log))
    timed("bind")
    inputs = _inputs(torch, entry)
    with torch.no_grad():
        t = pc()
        try:
            out = entry(*inputs)
        except Exception as exc:
            res["error"] = _err(exc)
            return res
        t_first = pc()
        entry(*inputs)
        t_second = pc()
    res["first_call_ms"] = (t_first - t) * 1e3
    res["second_call_ms"] = (t_second - t_first) * 1e3
    res["import_to_first_ms"] = (t_first - t0) * 1e3
    res["missing_hooks"] = missing
    res["checksum"] = _checksum(torch, out)
    first = {k: v[0] for k, v in log.items() if k.endswith("_ms")}
    res["first"] = first
    res["second_run_ms"] = log["run_ms"][1] if len(log.get("run_ms", [])) > 1 else None
    # manifest_for runs inside bind; the other hooks run after it, during the first call.
    accounted = sum(v for k, v in first.items() if k != "manifest_for_ms")
    res["other_first_call_ms"] = res["first_call_ms"] - accounted
    # Steady state: whole entry vs the bare runner on the same tensors → the shim's per-call cost.
    raw = log.get("raw_runner")
    args = log.get("raw_args")
    with torch.no_grad():
        for _ in range(cfg["warmup"]):
            entry(*inputs)
        if raw is not None and args is not None:
            il = _interleaved(
                {"entry": lambda: entry(*inputs), "raw": lambda: raw.run(args)},
                cfg["rounds"],
                cfg["min_batch_s"],
            )
            res["steady_entry_us"] = il["median_us"]["entry"]
            res["steady_raw_runner_us"] = il["median_us"]["raw"]
            res["shim_overhead_us"] = statistics.median(
                a - b for a, b in zip(il["per_call_us"]["entry"], il["per_call_us"]["raw"], strict=True)
            )
            res["raw_runner_inputs"] = len(args)
    # sha256 check on its own, repeated (file in page cache): the cost per first call.
    verify = getattr(importlib.import_module("aot_build.load.artifacts"), "verify", None)
    art_dir = getattr(importlib.import_module("aot_build.load.artifacts"), "artifact_dir", None)
    if verify is not None and art_dir is not None:
        folder = art_dir(cfg["package"])
        manifest = json.loads((folder / "manifest.json").read_text())
        sizes = []
        times = []
        for name, rec in manifest.get("files", {}).items():
            t = pc()
            verify(folder / name, rec["sha256"])
            times.append((pc() - t) * 1e3)
            sizes.append(rec.get("size", 0))
        res["verify_each_file_ms"] = times
        res["artifact_sizes"] = sizes
    return res


def _w_setup(cfg: dict[str, Any]) -> dict[str, Any]:
    """Build the precompile artifact and the .pt2 for the entry (compiler on PATH)."""
    import torch
    import torch._inductor

    pkg = importlib.import_module(cfg["package"])
    entry = getattr(pkg, cfg["entry"])
    fn = entry.__wrapped__
    inputs = _inputs(torch, entry)
    res: dict[str, Any] = {}

    t = time.perf_counter()
    pc: dict[str, Any] = {}
    # The function's nn.Module globals as the package defines them (compiling adds its own).
    module_globals = {k: v for k, v in fn.__globals__.items() if isinstance(v, torch.nn.Module)}
    try:
        with torch.no_grad():
            compiled = torch.compile(fn, fullgraph=True).aot_compile((inputs, {}))
        try:
            compiled.save_compiled_function(cfg["precompile_path"])
        except RuntimeError as exc:
            # "Failed to serialize ... mark these as external data": nn.Module globals (the
            # weights) cannot be pickled. Do what the message asks: pass every nn.Module global
            # of the function's module as external data; the loader passes the same objects.
            if "external data" not in str(exc):
                raise
            pc["plain_save_error"] = _err(exc)
            compiled.save_compiled_function(cfg["precompile_path"], external_data=module_globals)
            pc["external_globals"] = sorted(module_globals)
        pc.update(ok=True, bytes=os.path.getsize(cfg["precompile_path"]))
    except Exception as exc:
        pc.update(ok=False, error=_err(exc))
    pc["seconds"] = time.perf_counter() - t
    res["precompile"] = pc

    class Wrapper(torch.nn.Module):
        """Calls the entry's function; its global weights get baked into the .pt2."""

        def forward(self, *args: Any) -> Any:
            return fn(*args)

    t = time.perf_counter()
    try:
        ep = torch.export.export(Wrapper(), inputs)
        torch._inductor.aoti_compile_and_package(ep, package_path=cfg["pt2_path"])
        res["aoti_pt2"] = {"ok": True, "bytes": os.path.getsize(cfg["pt2_path"])}
    except Exception as exc:
        res["aoti_pt2"] = {"ok": False, "error": _err(exc)}
    res["aoti_pt2"]["seconds"] = time.perf_counter() - t
    with torch.no_grad():
        res["eager_checksum"] = _checksum(torch, fn(*inputs))
    return res


def _w_interleave(cfg: dict[str, Any]) -> dict[str, Any]:
    """Steady state of every loadable approach in ONE process, in alternating batches.

    Each round times one batch of each contender (order rotated every round); per-call medians
    over rounds, and the median of the per-round ratio against torch.compile.
    """
    import torch

    pkg = importlib.import_module(cfg["package"])
    entry = getattr(pkg, cfg["entry"])
    inputs = _inputs(torch, entry)
    fns: dict[str, Callable[..., Any]] = {}
    errors: dict[str, str] = {}
    with torch.no_grad():
        for mode in cfg["modes"]:
            try:
                f = _load_mode(mode, torch, entry, cfg)
                for _ in range(cfg["warmup"]):
                    f(*inputs)
                fns[mode] = f
            except Exception as exc:
                errors[mode] = _err(exc)
        il = _interleaved(
            {k: (lambda f=f: f(*inputs)) for k, f in fns.items()}, cfg["rounds"], cfg["min_batch_s"]
        )
    per = il["per_call_us"]
    out: dict[str, Any] = {**il, "errors": errors, "num_threads": torch.get_num_threads()}
    if "compile" in per:
        out["median_ratio_vs_compile"] = {
            k: statistics.median(a / b for a, b in zip(v, per["compile"], strict=True))
            for k, v in per.items()
        }
    return out


def _worker(mode: str, cfg: dict[str, Any]) -> None:
    try:
        if mode == "setup":
            res = _w_setup(cfg)
        elif mode == "breakdown":
            res = _w_breakdown(cfg)
        elif mode == "interleave":
            res = _w_interleave(cfg)
        else:
            res = _w_measure(mode, cfg)
    except Exception as exc:
        res = {"mode": mode, "error": _err(exc)}
    emit_result(RESULT_MARK, res)


# --------------------------------------------------------------------------------------------
# Driver side: runs in the dev venv.
# --------------------------------------------------------------------------------------------


_log = logger("cold_start")


def _hash_tree(paths: Iterable[Path], extra: str = "") -> str:
    """Content hash of source files (skipping caches and build outputs)."""
    h = hashlib.sha256(extra.encode())
    for root in paths:
        files = [root] if root.is_file() else sorted(root.rglob("*"))
        for f in files:
            if not f.is_file() or "__pycache__" in f.parts or f.suffix in (".pyc", ".so"):
                continue
            rel = f.relative_to(REPO) if f.is_relative_to(REPO) else f
            if any(p in ("build", "dist") or p.endswith(".egg-info") for p in rel.parts):
                continue
            h.update(str(rel).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _file_sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _copy_source(src: Path, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(
        src,
        dest,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "build", "dist", "*.egg-info", "_aot_build"),
    )


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, text=True, capture_output=True, **kw)
    if proc.returncode != 0:
        raise SystemExit(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n--- stdout\n{proc.stdout[-4000:]}\n"
            f"--- stderr\n{proc.stderr[-4000:]}"
        )
    return proc


def _build_wheel(items: list[Path], copy_to: Path, outdir: Path, python: str) -> Path:
    """``python -m build --wheel --no-isolation`` on a copy of a project's ``items`` (the repo's
    own tree may be edited or built by others at the same time)."""
    if copy_to.exists():
        shutil.rmtree(copy_to)
    copy_to.mkdir(parents=True)
    for item in items:
        if item.is_dir():
            _copy_source(item, copy_to / item.name)
        elif item.is_file():
            shutil.copy2(item, copy_to / item.name)
    if outdir.exists():
        shutil.rmtree(outdir)
    _run([python, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(outdir), str(copy_to)])
    wheels = sorted(outdir.glob("*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"expected one wheel in {outdir}, found {wheels}")
    return wheels[0]


def _stamp_ok(path: Path, value: str) -> bool:
    return path.is_file() and path.read_text() == value


def _torch_release() -> str:
    from importlib import metadata

    try:
        return metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError:
        return "2.13.0"


def setup(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Wheels, bench venv and per-entry artifacts, each rebuilt only when its inputs changed."""
    info: dict[str, Any] = {}
    build_py = args.build_python
    aot_src = [REPO / "aot_build", REPO / "pyproject.toml"]
    aot_hash = _hash_tree(aot_src)
    wheels = work / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)

    stamp = work / "aot_build.stamp"
    aot_out = wheels / "aot_build"
    found = sorted(aot_out.glob("*.whl")) if aot_out.is_dir() else []
    if args.rebuild or not found or not _stamp_ok(stamp, aot_hash):
        _log("building the aot-build wheel")
        items = [*aot_src, *(REPO / n for n in ("README.md", "LICENSE", "LICENSE.txt"))]
        aot_wheel = _build_wheel(items, work / "src" / "aot-build", aot_out, build_py)
        stamp.write_text(aot_hash)
    else:
        aot_wheel = found[0]
    info["aot_build_wheel"] = str(aot_wheel)
    info["aot_build_source_sha256"] = aot_hash

    if args.wheel:
        ex_wheel = Path(args.wheel).resolve()
        info["example_wheel_source"] = "given with --wheel"
    else:
        ex_src = REPO / PACKAGE
        ex_hash = _hash_tree([ex_src / PACKAGE, ex_src / "pyproject.toml"], extra=aot_hash + args.torch)
        stamp = work / "example_pkg.stamp"
        ex_out = wheels / PACKAGE
        found = sorted(ex_out.glob("*.whl")) if ex_out.is_dir() else []
        if args.rebuild or not found or not _stamp_ok(stamp, ex_hash):
            _log("building example_pkg's wheel (compiles every entry; ~1 min)")
            t = time.perf_counter()
            items = [
                p
                for p in ex_src.iterdir()
                if p.name not in ("build", "dist") and not p.name.endswith(".egg-info") and p.name[0] != "."
            ]
            ex_wheel = _build_wheel(items, work / "src" / PACKAGE, ex_out, build_py)
            info["example_wheel_build_s"] = time.perf_counter() - t
            stamp.write_text(ex_hash)
        else:
            ex_wheel = found[0]
        info["example_wheel_source"] = "built from example_pkg/"
        info["example_pkg_source_sha256"] = ex_hash
    info["example_wheel"] = str(ex_wheel)
    ex_sha = _file_sha(ex_wheel)
    info["example_wheel_sha256"] = ex_sha

    venv = work / "venv"
    vpy = venv / "bin" / "python"
    if args.rebuild or not vpy.exists():
        if venv.exists():
            shutil.rmtree(venv)
        _log(f"creating the bench venv with torch=={args.torch}")
        _run([sys.executable, "-m", "venv", str(venv)])
        _run([str(vpy), "-m", "pip", "install", "-q", f"torch=={args.torch}"])
    want = f"{_file_sha(aot_wheel)} {ex_sha} torch=={args.torch}"
    stamp = work / "venv.stamp"
    if not _stamp_ok(stamp, want):
        _log("installing the wheels into the bench venv")
        _run(
            [
                str(vpy),
                "-m",
                "pip",
                "install",
                "-q",
                "--force-reinstall",
                "--no-deps",
                str(aot_wheel),
                str(ex_wheel),
            ]
        )
        # Dependencies (torch pinned exactly; pip's find-links configuration supplies it).
        _run([str(vpy), "-m", "pip", "install", "-q", f"torch=={args.torch}", str(aot_wheel), str(ex_wheel)])
        stamp.write_text(want)
    info["venv"] = str(venv)
    info["venv_torch"] = _run([str(vpy), "-c", "import torch; print(torch.__version__)"]).stdout.strip()

    art = work / "artifacts" / f"{args.entry}-{ex_sha[:12]}-v{SETUP_VERSION}"
    setup_json = art / "setup.json"
    if args.rebuild or not setup_json.is_file():
        if art.exists():
            shutil.rmtree(art)
        art.mkdir(parents=True)
        _log(f"building the precompile artifact and the .pt2 for {args.entry} (~1-2 min)")
        cfg = {
            "package": PACKAGE,
            "entry": args.entry,
            "precompile_path": str(art / "precompiled.bin"),
            "pt2_path": str(art / "entry.pt2"),
        }
        res = _spawn(work, vpy, "setup", cfg, compiler=True, timeout=1800)
        setup_json.write_text(json.dumps(res, indent=1))
    res = json.loads(setup_json.read_text())
    info["artifacts"] = res
    info["precompile_path"] = str(art / "precompiled.bin")
    info["pt2_path"] = str(art / "entry.pt2")
    return info


def _spawn(
    work: Path, vpy: Path, mode: str, cfg: dict[str, Any], compiler: bool, timeout: float = 900
) -> dict[str, Any]:
    """Run one worker in a fresh process: neutral cwd, empty Inductor cache, and (compiler=False)
    PATH limited to the venv's bin."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "TORCH", "AOT_BUILD", "VIRTUAL_ENV"))
    }
    bindir = str(vpy.parent)
    env["PATH"] = bindir if not compiler else bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
    env["VIRTUAL_ENV"] = str(vpy.parent.parent)
    env["AOT_BUILD_STRICT"] = "1"
    if THREADS[0]:
        env["OMP_NUM_THREADS"] = str(THREADS[0])
    env.pop("CC", None)
    env.pop("CXX", None)
    tmp_root = work / "tmp"
    tmp_root.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tmp_root, prefix=f"{mode}-") as tmp:
        cache = Path(tmp) / "inductor-cache"
        cache.mkdir()
        cwd = Path(tmp) / "cwd"
        cwd.mkdir()
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
        env["TMPDIR"] = tmp
        cmd = [str(vpy), "-s", str(HERE), "--worker", mode, "--config", json.dumps(cfg)]
        t = time.perf_counter()
        load0 = os.getloadavg()[0]
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"mode": mode, "error": f"timed out after {timeout}s"}
        wall = time.perf_counter() - t
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(RESULT_MARK)), None)
    if line is None:
        return {
            "mode": mode,
            "error": f"worker exited {proc.returncode} without a result\n{proc.stderr[-2500:]}",
        }
    res: dict[str, Any] = json.loads(line[len(RESULT_MARK) :])
    res["process_wall_ms"] = wall * 1e3
    res["loadavg_1m_before"] = load0
    res["loadavg_1m_after"] = os.getloadavg()[0]
    if "error" in res:
        res["stderr_tail"] = proc.stderr[-1500:]
    return res


def _med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    keys = (
        "import_torch_ms",
        "import_pkg_ms",
        "load_ms",
        "first_call_ms",
        "second_call_ms",
        "import_to_first_ms",
    )
    out: dict[str, Any] = {"runs": len(runs), "ok": len(ok)}
    for k in keys:
        out[k] = _med([r[k] for r in ok if k in r])
    # import torch alone varies by hundreds of ms between processes (page cache, scheduling);
    # everything after it is what the approaches differ in.
    out["after_torch_ms"] = _med(
        [r["import_to_first_ms"] - r["import_torch_ms"] for r in ok if "import_to_first_ms" in r]
    )
    out["steady_us"] = _med([r["steady"]["median_us"] for r in ok if "steady" in r])
    out["process_wall_ms"] = _med([r["process_wall_ms"] for r in ok])
    out["checksum"] = ok[0]["checksum"] if ok else None
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        out["error"] = errors[0]
    return out


_fmt = number


_first_line = first_line


def render(report: dict[str, Any]) -> str:
    s = report["summary"]
    entry = report["config"]["entry"]
    out = [f"### Cold start, `{PACKAGE}.{entry}` (medians; fresh process per run)", ""]
    out.append(
        "| approach | runs ok | import torch+pkg (ms) | load (ms) | first call (ms) | "
        "import→first result (ms) | same, after `import torch` (ms) | 2nd call (ms) | "
        "steady per call (µs) |"
    )
    out.append("|---|---|---|---|---|---|---|---|---|")
    for mode, meta in MODES.items():
        if mode not in s:
            continue
        m = s[mode]
        imp = None if m["import_torch_ms"] is None else m["import_torch_ms"] + m["import_pkg_ms"]
        out.append(
            f"| {meta['label']} | {m['ok']}/{m['runs']} | {_fmt(imp)} | {_fmt(m['load_ms'])} | "
            f"{_fmt(m['first_call_ms'])} | **{_fmt(m['import_to_first_ms'])}** | "
            f"{_fmt(m.get('after_torch_ms'))} | {_fmt(m['second_call_ms'], 2)} | "
            f"{_fmt(m['steady_us'])} |"
        )
    fails = {mode: s[mode]["error"] for mode in s if s[mode].get("error")}
    if fails:
        out.append("")
        for mode, err in fails.items():
            out.append(f"- `{mode}` failed: `{_first_line(err)}`")
    r = report.get("ratios", {})
    out += ["", "### Ratios", ""]
    if r.get("first_result_overhead_vs_eager_ms") is not None:
        out.append(
            f"- aot_build first-result overhead over eager, counted after `import torch`: "
            f"**{r['after_torch_overhead_vs_eager_ms']:+.1f} ms** (first call alone: "
            f"{r['first_call_overhead_vs_eager_ms']:+.1f} ms; whole import→first result: "
            f"{r['first_result_overhead_vs_eager_ms']:+.1f} ms, within `import torch`'s spread)"
        )
    ratio_lines = [
        (
            "first_result_speedup_vs_compile",
            "- torch.compile (cold cache) import→first result is {:.1f}× aot_build's",
        ),
        (
            "steady_ratio_vs_compile_separate",
            "- steady state aot_build / torch.compile, separate processes: {:.2f}×",
        ),
        (
            "steady_ratio_vs_compile_interleaved",
            "- steady state aot_build / torch.compile, interleaved in one process (median of "
            "per-round ratios): **{:.2f}×**",
        ),
        ("steady_ratio_vs_eager_interleaved", "- steady state aot_build / eager, interleaved: {:.2f}×"),
    ]
    out += [template.format(r[key]) for key, template in ratio_lines if r.get(key) is not None]
    il = report.get("interleave")
    if il and "median_us" in il:
        out += [
            "",
            f"### Steady state, interleaved in one process ({il['rounds']} rounds × "
            f"{il['calls_per_batch']} calls per contender, order rotated)",
            "",
            "| approach | per call (µs, median) | ratio vs torch.compile (median per round) |",
            "|---|---|---|",
        ]
        for mode, us in il["median_us"].items():
            ratio = il.get("median_ratio_vs_compile", {}).get(mode)
            out.append(f"| {MODES[mode]['label']} | {us:,.1f} | {_fmt(ratio, 2)} |")
        for mode, err in il.get("errors", {}).items():
            out.append(f"- `{mode}` not in the interleaved run: `{_first_line(err)}`")
    b = report.get("breakdown_summary")
    if b:
        out += [
            "",
            f"### aot_build first call, taken apart (cold process, no compiler; median of {b['runs']})",
            "",
            "| step | ms |",
            "|---|---|",
        ]
        for label, key in (
            ("import torch", "import_torch_ms"),
            (f"import {PACKAGE} (decorators only)", "import_pkg_ms"),
            ("import aot_build.load.shim (paid by the first call)", "import_shim_ms"),
            ("first call, total", "first_call_ms"),
            ("— bind(): manifest + variant setup", "bind_ms"),
            ("— — of which: read manifest (`manifest_for`)", "manifest_for_ms"),
            ("— host CPU level (`host_cpu_targets`)", "host_cpu_targets_ms"),
            ("— sha256 check (`verify`)", "verify_ms"),
            ("— dlopen + container init (`open_library`)", "open_library_ms"),
            ("— first run of the library (`runner.run`)", "run_ms"),
            ("— rest (argument/weight checks, pytree)", "other_first_call_ms"),
            ("second call", "second_call_ms"),
            ("second run of the library alone", "second_run_ms"),
        ):
            out.append(f"| {label} | {_fmt(b.get(key), 2)} |")
        if b.get("steady_entry_us") is not None:
            out.append(
                f"\nSteady state, interleaved in the same process: entry call {_fmt(b['steady_entry_us'])} µs"
                f" vs the bare runner's `run` on the same {b.get('raw_runner_inputs')} tensors "
                f"{_fmt(b.get('steady_raw_runner_us'))} µs → shim overhead ≈ "
                f"**{_fmt(b.get('shim_overhead_us'))} µs per call** (median of per-round differences)."
            )
    checks = report.get("checksums", {})
    if checks:
        ref = checks.get("eager")
        bad = {
            k: v
            for k, v in checks.items()
            if ref is not None and v is not None and abs(v - ref) > 1e-3 * max(1.0, abs(ref))
        }
        out.append("")
        out.append(
            "Outputs agree across approaches (sum of output tensors within 1e-3 relative)."
            if not bad
            else f"**Output mismatch vs eager**: {bad} (eager {ref})"
        )
    return "\n".join(out)


def _breakdown_summary(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return None
    out: dict[str, Any] = {"runs": len(ok)}
    for k in (
        "import_torch_ms",
        "import_pkg_ms",
        "import_shim_ms",
        "first_call_ms",
        "second_call_ms",
        "other_first_call_ms",
    ):
        out[k] = _med([r[k] for r in ok if r.get(k) is not None])
    for k in ("bind_ms", "manifest_for_ms", "host_cpu_targets_ms", "verify_ms", "open_library_ms", "run_ms"):
        out[k] = _med([r["first"][k] for r in ok if k in r.get("first", {})])
    out["second_run_ms"] = _med([r["second_run_ms"] for r in ok if r.get("second_run_ms") is not None])
    for k in ("steady_entry_us", "steady_raw_runner_us", "shim_overhead_us"):
        out[k] = _med([r[k] for r in ok if r.get(k) is not None])
    out["raw_runner_inputs"] = ok[0].get("raw_runner_inputs")
    out["missing_hooks"] = ok[0].get("missing_hooks", [])
    return out


def _meta() -> dict[str, Any]:
    def sh(cmd: list[str]) -> str:
        try:
            return subprocess.run(cmd, text=True, capture_output=True, cwd=REPO).stdout.strip()
        except OSError:
            return ""

    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in sh(["lscpu"]).splitlines() if ln.startswith("Model name")), ""
    )
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "cpu": cpu or platform.processor(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "git_head": sh(["git", "rev-parse", "--short", "HEAD"]),
        "git_dirty_paths": sh(["git", "status", "--porcelain", "--", "aot_build", PACKAGE]).splitlines(),
        "uptime_before": sh(["uptime"]),
    }


def analyse(report: dict[str, Any]) -> None:
    """Add medians (``summary``), ``ratios``, ``breakdown_summary`` and ``checksums`` to a report
    holding raw ``runs``, ``breakdown_runs`` and ``interleave``."""
    summary = {m: _summary(rs) for m, rs in report["runs"].items()}
    interleave = report.get("interleave")
    ratios: dict[str, Any] = {}
    a, e, c = summary.get("aot_build"), summary.get("eager"), summary.get("compile")
    if a and e and a["import_to_first_ms"] is not None and e["import_to_first_ms"] is not None:
        ratios["first_result_overhead_vs_eager_ms"] = a["import_to_first_ms"] - e["import_to_first_ms"]
        ratios["after_torch_overhead_vs_eager_ms"] = a["after_torch_ms"] - e["after_torch_ms"]
        ratios["first_call_overhead_vs_eager_ms"] = a["first_call_ms"] - e["first_call_ms"]
    if a and c and a["import_to_first_ms"] and c["import_to_first_ms"]:
        ratios["first_result_speedup_vs_compile"] = c["import_to_first_ms"] / a["import_to_first_ms"]
    if a and c and a["steady_us"] and c["steady_us"]:
        ratios["steady_ratio_vs_compile_separate"] = a["steady_us"] / c["steady_us"]
    if interleave and "median_ratio_vs_compile" in interleave:
        ratios["steady_ratio_vs_compile_interleaved"] = interleave["median_ratio_vs_compile"].get("aot_build")
    per = (interleave or {}).get("per_call_us", {})
    if {"aot_build", "eager"} <= set(per):
        ratios["steady_ratio_vs_eager_interleaved"] = statistics.median(
            x / y for x, y in zip(per["aot_build"], per["eager"], strict=True)
        )
    report["summary"] = summary
    report["ratios"] = ratios
    report["breakdown_summary"] = _breakdown_summary(report.get("breakdown_runs", []))
    report["checksums"] = {m: s["checksum"] for m, s in summary.items() if s.get("checksum") is not None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--runs", type=int, default=5, help="fresh processes per fast approach (default 5)")
    p.add_argument(
        "--slow-runs", type=int, default=3, help="fresh processes for torch.compile and precompile"
    )
    p.add_argument("--entry", default="attention_block", help=f"{PACKAGE} entry to measure")
    p.add_argument("--json", type=Path, help="write the raw numbers here")
    p.add_argument("--wheel", help=f"use this {PACKAGE} wheel instead of building one")
    p.add_argument("--workdir", type=Path, default=REPO / "benchmarks" / ".work")
    p.add_argument("--rebuild", action="store_true", help="rebuild wheels, venv and artifacts")
    p.add_argument("--torch", default=_torch_release(), help="exact torch release for the bench venv")
    p.add_argument("--build-python", default=sys.executable, help="interpreter that builds the wheels")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    p.add_argument("--no-interleave", action="store_true", help="skip the interleaved steady-state run")
    p.add_argument("--no-breakdown", action="store_true", help="skip the aot_build first-call breakdown")
    p.add_argument("--rounds", type=int, default=40, help="rounds of the interleaved measurement")
    p.add_argument("--batches", type=int, default=30, help="steady-state batches per fresh process")
    p.add_argument("--min-batch-ms", type=float, default=15.0, help="minimum duration of one batch")
    p.add_argument("--warmup", type=int, default=20, help="calls before steady-state timing")
    p.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for the workers (0: default)")
    p.add_argument("--render", type=Path, help="print the tables of a --json file; measure nothing")
    args = p.parse_args(argv)
    THREADS[0] = args.threads
    if args.render:
        report = json.loads(args.render.read_text())
        analyse(report)
        print(render(report))
        return 0

    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        p.error(f"unknown modes {unknown}; choose from {list(MODES)}")
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    meta = _meta()
    _log(f"load before: {meta['uptime_before']}")
    info = setup(args, work)
    vpy = Path(info["venv"]) / "bin" / "python"
    base_cfg: dict[str, Any] = {
        "package": PACKAGE,
        "entry": args.entry,
        "precompile_path": info["precompile_path"],
        "pt2_path": info["pt2_path"],
        "warmup": args.warmup,
        "batches": args.batches,
        "min_batch_s": args.min_batch_ms / 1e3,
        "rounds": args.rounds,
        "threads": args.threads,
    }
    art = info["artifacts"]
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    base_cfg["precompile_external"] = art.get("precompile", {}).get("external_globals", [])
    for mode in modes:
        made_by = SAME_AS.get(mode, mode)
        if made_by in ("precompile", "aoti_pt2") and not art.get(made_by, {}).get("ok", False):
            why = art.get(made_by, {}).get("error", "?")
            runs[mode].append({"mode": mode, "error": "setup failed: " + why})
    todo = {m: (args.slow_runs if MODES[m]["slow"] else args.runs) for m in modes if not runs[m]}
    breakdown: list[dict[str, Any]] = []
    n_max = max([*todo.values(), 0 if args.no_breakdown else args.runs])
    # Round-robin over approaches, so slow drifts of the machine's load hit all of them alike.
    for i in range(n_max):
        for mode, n in todo.items():
            if i < n:
                _log(f"run {i + 1}/{n} {mode}")
                r = _spawn(work, vpy, mode, base_cfg, compiler=MODES[mode]["compiler"])
                if "error" in r:
                    _log(f"  {mode} failed: {_first_line(r['error'])}")
                else:
                    _log(
                        f"  {mode}: import→first {r['import_to_first_ms']:.0f} ms, "
                        f"steady {r['steady']['median_us']:.1f} µs"
                    )
                runs[mode].append(r)
        if not args.no_breakdown and i < args.runs:
            _log(f"run {i + 1}/{args.runs} breakdown")
            breakdown.append(_spawn(work, vpy, "breakdown", base_cfg, compiler=False))
    interleave: dict[str, Any] | None = None
    if not args.no_interleave:
        il_modes = [
            m for m in modes if m not in SAME_AS and not (runs[m] and all("error" in r for r in runs[m]))
        ]
        _log(f"interleaved steady state: {', '.join(il_modes)}")
        interleave = _spawn(work, vpy, "interleave", {**base_cfg, "modes": il_modes}, compiler=True)
    meta["uptime_after"] = subprocess.run(["uptime"], text=True, capture_output=True).stdout.strip()
    _log(f"load after: {meta['uptime_after']}")

    report: dict[str, Any] = {
        "meta": meta,
        "config": {**base_cfg, "runs": args.runs, "slow_runs": args.slow_runs, "modes": modes},
        "setup": info,
        "interleave": interleave,
        "runs": runs,
        "breakdown_runs": breakdown,
    }
    analyse(report)
    text = render(report)
    return publish(report, text, args.json, _log)


if __name__ == "__main__":
    dispatch(_worker, main)
