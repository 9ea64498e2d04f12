"""What the benchmark scripts share: how a worker reports its result or its error, and the
driver's log lines. Standard library only (workers import it before torch)."""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def error_text(exc: BaseException, limit: int = 2500) -> str:
    """The end of a traceback: enough to see what failed, short enough for a report."""
    text = "".join(traceback.format_exception(exc)).strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def emit_result(mark: str, result: dict[str, Any]) -> None:
    """A worker's result: one line, ``mark`` then JSON, read back by the driver."""
    sys.stdout.flush()
    print(mark + json.dumps(result, default=str), flush=True)


def logger(name: str) -> Callable[[str], None]:
    def log(msg: str) -> None:
        print(f"[{name} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    return log


def number(v: float | None, digits: int = 1) -> str:
    """A table cell: thousands separators, "—" for a missing value."""
    return "—" if v is None else f"{v:,.{digits}f}"


def first_line(err: str) -> str:
    """The line of a traceback that says what went wrong."""
    lines = [ln.strip() for ln in err.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ":" in ln and not ln.startswith(("File ", "^", "~")):
            return ln[:300]
    return lines[-1][:300] if lines else err[:300]


# ---- timing and result checks (workers; ``torch`` is passed in, never imported here)


def loop_ns(fn: Callable[[], object], n: int) -> int:
    """Nanoseconds for ``n`` calls of ``fn``."""
    pc = time.perf_counter_ns
    t = pc()
    for _ in range(n):
        fn()
    return pc() - t


def calibrate(fn: Callable[[], object], target_ns: float) -> int:
    """Calls per loop so that one loop lasts about ``target_ns``: the per-call time is the best
    of 3 loops of at least 5 ms (one slow call must not shrink every later loop)."""
    n = 1
    while loop_ns(fn, n) < 5_000_000 and n < 1 << 22:
        n *= 2
    per_call = min(loop_ns(fn, n) for _ in range(3)) / n
    return max(1, round(target_ns / max(per_call, 1.0)))


def interleaved(fns: dict[str, Callable[[], object]], rounds: int, loop_ms: float) -> dict[str, Any]:
    """Per-call µs of each contender: ``rounds`` rounds, each timing one loop of every
    contender (order rotated each round). Callers warm the contenders up first."""
    names = list(fns)
    calls = {k: calibrate(f, loop_ms * 1e6) for k, f in fns.items()}
    per: dict[str, list[float]] = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            per[k].append(loop_ns(fns[k], calls[k]) / calls[k] / 1e3)
    return {
        "calls_per_loop": calls,
        "per_call_us": per,
        "median_us": {k: statistics.median(v) for k, v in per.items()},
    }


def tensor_leaves(torch: Any, out: Any) -> list[Any]:
    from torch.utils import _pytree as pytree

    return [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]


def same_result(torch: Any, a: Any, b: Any) -> bool:
    """Every output tensor equal (``torch.allclose``, float tolerance for compiled kernels)."""
    la, lb = tensor_leaves(torch, a), tensor_leaves(torch, b)
    if type(a) is not type(b) or len(la) != len(lb) or not la:
        return False
    for x, y in zip(la, lb, strict=True):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not torch.allclose(x.double(), y.double(), rtol=1e-4, atol=1e-5):
            return False
    return True


# ---- building benchmark packages (driver side)

REPO = Path(__file__).resolve().parent.parent


def compile_side_hash() -> str:
    """Hash of aot_build's sources that shape artifacts: the build cache's own fingerprint."""
    from aot_build.compile.sources import build_side_hash

    return build_side_hash()


def torch_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return "?"


def build_package(
    name: str,
    files: dict[str, str],
    targets: list[str],
    work: Path,
    salt: str,
    rebuild: bool,
    root: Path | None = None,
) -> Path:
    """Compile package ``name`` (sources ``files``: file name → text) for ``targets`` with the
    build's own child process (``python -m aot_build.compile job.json``), as the setuptools
    hook would; cached by hash under ``work/pkgs`` (one build per name there). ``root``: a
    folder holding another ``aot_build/`` to build with (first on the child's PYTHONPATH)
    instead of this checkout's. Returns the folder to put on sys.path."""
    log = logger("build")
    h = hashlib.sha256(f"{salt}\0{name}\0{' '.join(targets)}\0".encode())
    for fname in sorted(files):
        h.update(fname.encode() + b"\0" + files[fname].encode() + b"\0")
    digest = h.hexdigest()[:16]
    pkgs = work / "pkgs"
    site = pkgs / f"{name}-{digest}"
    done = site / "built.ok"
    if done.is_file() and not rebuild:
        return site
    if pkgs.is_dir():  # older builds of the same package
        for old in pkgs.glob(f"{name}-*"):
            if old.is_dir() and old.name.rsplit("-", 1)[0] == name:
                shutil.rmtree(old)
    (site / "staging").mkdir(parents=True)
    (site / name).mkdir()
    for fname, text in files.items():
        (site / name / fname).write_text(text, encoding="utf-8")
    modules = sorted(name if f == "__init__.py" else f"{name}.{f[:-3]}" for f in files if f.endswith(".py"))
    from aot_build.build_config import BuildConfig

    config = BuildConfig(
        build_lib=str(site),
        packages=(name,),
        modules=tuple(modules),
        targets=tuple(targets),
        out_dir=str(site / "staging"),
    )
    config.write(site / "job.json")
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(work / "inductor-cache"))
    if root is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    for k in ("AOT_BUILD_STRICT", "ATEN_CPU_CAPABILITY"):
        env.pop(k, None)
    log(f"compiling {name} for {', '.join(targets)} (cached afterwards)")
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "aot_build.compile", str(site / "job.json")],
        env=env,
        cwd=site,
        text=True,
        capture_output=True,
    )
    (site / "build.log").write_text(proc.stdout + "\n--- stderr\n" + proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(
            f"compiling {name} failed ({proc.returncode}); log: {site / 'build.log'}\n"
            f"{(proc.stdout + proc.stderr)[-3000:]}"
        )
    shutil.copytree(site / "staging" / name / "_aot_build", site / name / "_aot_build")
    done.write_text(digest)
    log(f"compiled {name} in {time.perf_counter() - t:.0f} s")
    return site


def cpu_model() -> str:
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def run_meta(*dirty: str) -> dict[str, Any]:
    """What BENCHMARKS.md records of a run: date, command, machine, versions, commit (and
    uncommitted changes under ``dirty``), load before."""

    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", *a], text=True, capture_output=True, cwd=REPO).stdout.strip()
        except OSError:
            return ""

    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch_version(),
        "git_head": git("rev-parse", "--short", "HEAD"),
        "git_dirty_paths": git("status", "--porcelain", "--", *dirty).splitlines(),
        "loadavg_before": os.getloadavg(),
    }


# ---- options and the end of the scripts that build their own wheels and venv


def add_build_options(p: Any, workdir: Path, torch_release: str) -> None:
    """``--json``, ``--workdir``, ``--torch``, ``--build-python``, ``--render`` on the
    argparse parser ``p``."""
    p.add_argument("--json", type=Path, help="write the raw numbers here")
    p.add_argument("--workdir", type=Path, default=workdir)
    p.add_argument("--torch", default=torch_release, help="exact torch release for the bench venv")
    p.add_argument("--build-python", default=sys.executable, help="interpreter that builds the wheels")
    p.add_argument("--render", type=Path, help="print the tables of a --json file; measure nothing")


def rendered(args: Any, render: Callable[[dict[str, Any]], str]) -> bool:
    """With ``--render FILE``: print its tables and say so (the caller measures nothing)."""
    if args.render:
        print(render(json.loads(args.render.read_text())))
    return bool(args.render)


def publish(report: dict[str, Any], text: str, json_path: Path | None, log: Callable[[str], None]) -> int:
    """Print the tables ``text``; write the raw ``report`` to ``json_path`` when given."""
    print(text)
    if json_path:
        json_path.write_text(json.dumps(report, indent=1, default=str))
        log(f"raw numbers written to {json_path}")
    return 0


def dispatch(worker: Callable[[str, dict[str, Any]], None], main: Callable[[], int]) -> None:
    """``script.py --worker KIND --config JSON`` runs one worker; anything else, ``main``."""
    if len(sys.argv) >= 5 and sys.argv[1] == "--worker" and sys.argv[3] == "--config":
        worker(sys.argv[2], json.loads(sys.argv[4]))
    else:
        sys.exit(main())
