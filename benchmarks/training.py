#!/usr/bin/env python3
"""Training entries (``@aot_entry(..., backward=True)``): one training step (zero grads,
``loss = entry(x, t)``, ``loss.backward()``) with the compiled forward and backward libraries,
against eager (``entry.__wrapped__``) and ``torch.compile(entry.__wrapped__)``.

Usage (from the repository root, with the dev venv)::

    .venv/bin/python benchmarks/training.py [--quick] [--entries a,b] [--json OUT]
    .venv/bin/python benchmarks/training.py --render OUT     # the tables of a --json file

Setup (cached under ``--workdir``, default ``benchmarks/.work/training``; rebuilt when the
sources change): the aot-build wheel and the wheel of a benchmark-only package ``train_bench``
(written by this script: ``small_loss`` is tests/packages/train_pkg's ``loss`` as is, a
cross-entropy over a small MLP global; ``mlp_loss`` the same over a 4-layer MLP of width 512;
``Block.forward`` a pre-norm transformer block, dim 256, 4 heads, as a method entry), both
built with ``python -m build --wheel --no-isolation`` by this interpreter with
``AOT_BUILD_TARGETS`` (``--targets``, default ``cpu-avx2``, what the default ``cpu`` loads on
an AVX2 or AVX-512 host); a venv with ``torch==<exact release>`` and both wheels.

Measurements, each in fresh processes of the bench venv's interpreter (neutral working
directory, empty ``TORCHINDUCTOR_CACHE_DIR``, ``AOT_BUILD_STRICT=1``: a fallback to Python is
an error, never a number; the aot_build processes get ``PATH=<venv>/bin`` only, no compiler):

* steady state, one process per entry: the three contenders warmed up, then timed in
  interleaved rounds (order rotated), medians of µs per step, and the median per-round ratio
  against eager;
* first step, one process per run, round-robin over approaches: from just before
  ``import torch`` to the end of the first ``backward()`` (``torch.compile`` with a cold cache
  compiles forward and backward there).

Every contender's loss and gradients (weights, and the input where it requires grad) are
compared with eager's for the same inputs before anything is timed (``torch.allclose``,
``--rtol``/``--atol``); a mismatch is an error. The compiled step must also run through
aot_build's autograd function (``_JoinedBackward``), or the run fails.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
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
)
from cold_start import _build_wheel, _file_sha, _hash_tree, _med, _run, _stamp_ok, _torch_release

HERE = Path(__file__).resolve()
RESULT_MARK = "@@TRAINING_RESULT@@"
PACKAGE = "train_bench"
#: Entries, in table order: name -> how the worker calls it.
ENTRIES = ("small_loss", "mlp_loss", "block")
APPROACHES = {
    "eager": "eager (`entry.__wrapped__`)",
    "compile": "`torch.compile(entry.__wrapped__)`",
    "aot_build": "aot_build wheel (no compiler on PATH)",
}

PYPROJECT = """\
[build-system]
requires = ["setuptools>=70", "aot-build", "torch"]
build-backend = "setuptools.build_meta"

[project]
name = "train-bench"
version = "0.1.0"
requires-python = ">=3.10"
dynamic = ["dependencies"]

[tool.setuptools]
packages = ["train_bench"]

[tool.aot-build]
targets = ["cpu"]
"""

MODULE = '''\
"""Benchmark-only training package (written by benchmarks/training.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from aot_build import aot_entry

torch.manual_seed(0)
#: tests/packages/train_pkg's encoder, as is
ENCODER = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 5))
FEATURES, WIDTH, CLASSES = 256, 512, 10
MLP = nn.Sequential(
    nn.Linear(FEATURES, WIDTH), nn.GELU(),
    nn.Linear(WIDTH, WIDTH), nn.GELU(),
    nn.Linear(WIDTH, WIDTH), nn.GELU(),
    nn.Linear(WIDTH, CLASSES),
)


def _batch(hi: int) -> tuple[dict[int, object], dict[int, object]]:
    batch = torch.export.Dim("batch", min=2, max=hi)
    return ({0: batch}, {0: batch})


@aot_entry(
    example_inputs=lambda: (torch.randn(8, 16), torch.randint(0, 5, (8,))),
    dynamic_shapes=lambda: _batch(64),
    backward=True,
)
def small_loss(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """train_pkg's ``loss``: cross-entropy of the encoder's logits."""
    return F.cross_entropy(ENCODER(x), target)


@aot_entry(
    example_inputs=lambda: (torch.randn(32, FEATURES), torch.randint(0, CLASSES, (32,))),
    dynamic_shapes=lambda: _batch(512),
    backward=True,
)
def mlp_loss(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of a 4-layer MLP (width 512)."""
    return F.cross_entropy(MLP(x), target)


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP (4x)."""

    def __init__(self, dim: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)

    @aot_entry(example_inputs=lambda: (Block(), torch.randn(8, 64, 256)), backward=True)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))
'''

# --------------------------------------------------------------------------------------------
# Worker side: runs inside the bench venv. Standard library at module level only.
# --------------------------------------------------------------------------------------------


class Case:
    """One entry's training step for each approach, on fixed inputs (seeded)."""

    def __init__(self, torch: Any, pkg: Any, name: str, batch: int) -> None:
        torch.manual_seed(1234)
        self.torch = torch
        self.name = name
        if name == "block":
            self.module = pkg.Block()
            self.params = list(self.module.parameters())
            self.inputs: tuple[Any, ...] = (torch.randn(batch, 64, 256, requires_grad=True),)
            self.entry: Any = self.module.forward  # the entry, bound to the instance
            self.eager: Any = pkg.Block.forward.__wrapped__
            self.bound: tuple[Any, ...] = (self.module,)
            self.shape = f"x {batch}×64×256 (requires grad); loss = out.square().mean()"
        else:
            self.entry = getattr(pkg, name)
            self.eager = self.entry.__wrapped__
            self.bound = ()
            mod = pkg.ENCODER if name == "small_loss" else pkg.MLP
            self.params = list(mod.parameters())
            feats = mod[0].in_features
            classes = mod[-1].out_features
            self.inputs = (torch.randn(batch, feats), torch.randint(0, classes, (batch,)))
            self.shape = f"x {batch}×{feats}, target {batch}"

    def function(self, approach: str) -> Callable[..., Any]:
        if approach == "aot_build":
            return self.entry  # type: ignore[no-any-return]
        eager = self.eager
        if self.bound:
            inst = self.bound[0]
            if approach == "compile":
                compiled = self.torch.compile(eager)
                return lambda *a: compiled(inst, *a)
            return lambda *a: eager(inst, *a)
        return self.torch.compile(eager) if approach == "compile" else eager  # type: ignore[no-any-return]

    def _zero(self) -> None:
        for t in (*self.params, *self.inputs):
            t.grad = None

    def step(self, fn: Callable[..., Any]) -> tuple[Any, Any]:
        """One training step: zero grads, forward, loss, backward. Returns (output, loss)."""
        self._zero()
        out = fn(*self.inputs)
        loss = out.square().mean() if self.name == "block" else out
        loss.backward()
        return out, loss

    def step_parts(self, fn: Callable[..., Any]) -> dict[str, Any]:
        """One step timed in parts (forward, backward), in ms."""
        pc = time.perf_counter
        self._zero()
        t0 = pc()
        out = fn(*self.inputs)
        loss = out.square().mean() if self.name == "block" else out
        t1 = pc()
        loss.backward()
        t2 = pc()
        return {"forward_ms": (t1 - t0) * 1e3, "backward_ms": (t2 - t1) * 1e3, "step_ms": (t2 - t0) * 1e3}

    def snapshot(self, fn: Callable[..., Any]) -> dict[str, Any]:
        """The loss, every gradient and the output's grad_fn after one step of ``fn``."""
        out, loss = self.step(fn)
        grads = [t.grad.detach().clone() for t in (*self.params, *self.inputs) if t.grad is not None]
        return {"loss": loss.detach().clone(), "grads": grads, "grad_fn": type(out.grad_fn).__name__}

    def check(self, got: dict[str, Any], want: dict[str, Any], rtol: float, atol: float) -> dict[str, Any]:
        """Raise unless loss and every gradient match eager's; the largest deviations."""
        torch = self.torch
        pairs = [(got["loss"], want["loss"]), *zip(got["grads"], want["grads"], strict=False)]
        if len(got["grads"]) != len(want["grads"]):
            n, m = len(got["grads"]), len(want["grads"])
            raise AssertionError(f"{self.name}: {n} gradients, eager has {m}")
        worst_abs = worst_rel = 0.0
        for i, (a, b) in enumerate(pairs):
            if a.shape != b.shape:
                raise AssertionError(
                    f"{self.name}: tensor {i} has shape {tuple(a.shape)}, eager {tuple(b.shape)}"
                )
            diff = float((a.double() - b.double()).abs().max())
            worst_abs = max(worst_abs, diff)
            worst_rel = max(worst_rel, diff / max(float(b.double().abs().max()), 1e-30))
            if not torch.allclose(a, b, rtol=rtol, atol=atol):
                what = "loss" if i == 0 else f"gradient {i - 1}"
                raise AssertionError(
                    f"{self.name}: {what} differs from eager's (max |diff| {diff:.3g}, "
                    f"rtol {rtol}, atol {atol})"
                )
        return {"max_abs_diff": worst_abs, "max_rel_diff": worst_rel, "tensors": len(pairs)}


def _require_compiled(case: Case, snap: dict[str, Any]) -> None:
    if snap["grad_fn"] != "_JoinedBackward":
        raise AssertionError(
            f"{case.name}: the compiled step's output has grad_fn {snap['grad_fn']}, not "
            "aot_build's _JoinedBackward (the compiled libraries did not run)"
        )


def _w_steady(cfg: dict[str, Any]) -> dict[str, Any]:
    """One entry: the three approaches checked against eager, warmed up, then interleaved."""
    import importlib

    import torch

    pkg = importlib.import_module(PACKAGE)
    case = Case(torch, pkg, cfg["entry"], cfg["batch"])
    fns = {a: case.function(a) for a in cfg["approaches"]}
    want = case.snapshot(fns["eager"])
    checks: dict[str, Any] = {}
    t_compile = 0.0
    for a, f in fns.items():
        t = time.perf_counter()
        snap = case.snapshot(f)
        if a == "compile":
            t_compile = time.perf_counter() - t
        if a == "aot_build":
            _require_compiled(case, snap)
        checks[a] = case.check(snap, want, cfg["rtol"], cfg["atol"])
    steps: dict[str, Callable[[], object]] = {a: functools.partial(case.step, f) for a, f in fns.items()}
    for f in steps.values():
        for _ in range(cfg["warmup"]):
            f()
    timing = interleaved(steps, cfg["rounds"], cfg["loop_ms"])
    per = timing["per_call_us"]
    timing["ratio_vs_eager"] = {
        a: statistics.median(x / y for x, y in zip(v, per["eager"], strict=True)) for a, v in per.items()
    }
    # a second check after the timing: the state the loops left must still give eager's result
    after = case.snapshot(fns["aot_build"])
    case.check(after, case.snapshot(fns["eager"]), cfg["rtol"], cfg["atol"])
    return {
        "entry": cfg["entry"],
        "inputs": case.shape,
        "params": sum(p.numel() for p in case.params),
        "num_threads": torch.get_num_threads(),
        "checks": checks,
        "compile_first_step_s": t_compile,
        **timing,
    }


def _w_first(cfg: dict[str, Any]) -> dict[str, Any]:
    """import torch → first backward done, for one approach; then checks against eager."""
    pc = time.perf_counter
    t0 = pc()
    import torch

    t1 = pc()
    import importlib

    pkg = importlib.import_module(PACKAGE)
    t2 = pc()
    case = Case(torch, pkg, cfg["entry"], cfg["batch"])
    fn = case.function(cfg["approach"])
    t3 = pc()
    first = case.step_parts(fn)
    t4 = pc()
    second = case.step_parts(fn)
    inductor = "torch._inductor" in sys.modules
    got = case.snapshot(fn)
    if cfg["approach"] == "aot_build":
        _require_compiled(case, got)
    check = case.check(got, case.snapshot(case.function("eager")), cfg["rtol"], cfg["atol"])
    return {
        "approach": cfg["approach"],
        "entry": cfg["entry"],
        "import_torch_ms": (t1 - t0) * 1e3,
        "import_pkg_ms": (t2 - t1) * 1e3,
        "setup_ms": (t3 - t2) * 1e3,
        "first": first,
        "second": second,
        "import_to_first_ms": (t4 - t0) * 1e3,
        "after_torch_ms": (t4 - t1) * 1e3,
        "inductor_imported_by_first_steps": inductor,
        "check": check,
    }


def _worker(mode: str, cfg: dict[str, Any]) -> None:
    try:
        res = _w_steady(cfg) if mode == "steady" else _w_first(cfg)
    except Exception as exc:
        res = {"mode": mode, "entry": cfg.get("entry"), "error": error_text(exc)}
    emit_result(RESULT_MARK, res)


# --------------------------------------------------------------------------------------------
# Driver side: runs in the dev venv. backends.py uses the setup helpers too.
# --------------------------------------------------------------------------------------------


_log = logger("training")


def uptime() -> str:
    return subprocess.run(["uptime"], text=True, capture_output=True).stdout.strip()


def aot_build_wheel(work: Path, python: str) -> Path:
    """The aot-build wheel, rebuilt when aot_build's sources change."""
    src = [REPO / "aot_build", REPO / "pyproject.toml"]
    digest = _hash_tree(src)
    out, stamp = work / "wheels" / "aot_build", work / "aot_build.stamp"
    found = sorted(out.glob("*.whl")) if out.is_dir() else []
    if found and _stamp_ok(stamp, digest):
        return found[0]
    _log("building the aot-build wheel")
    items = [*src, *(REPO / n for n in ("README.md", "LICENSE", "LICENSE.txt"))]
    wheel = _build_wheel(items, work / "src" / "aot-build", out, python)
    stamp.write_text(digest)
    return wheel


def project_wheel(name: str, items: list[Path], work: Path, python: str, targets: str, salt: str) -> Path:
    """A project's wheel built from ``items`` with ``AOT_BUILD_TARGETS=targets``; rebuilt when
    the items, ``salt`` (aot_build's hash) or the targets change."""
    digest = _hash_tree(items, extra=f"{salt}\0{targets}")
    out, stamp = work / "wheels" / name, work / f"{name}.stamp"
    found = sorted(out.glob("*.whl")) if out.is_dir() else []
    if found and _stamp_ok(stamp, digest):
        return found[0]
    _log(f"building {name}'s wheel for {targets} (compiles every entry)")
    t = time.perf_counter()
    saved = os.environ.get("AOT_BUILD_TARGETS")
    os.environ["AOT_BUILD_TARGETS"] = targets
    try:
        wheel = _build_wheel(items, work / "src" / name, out, python)
    finally:
        if saved is None:
            os.environ.pop("AOT_BUILD_TARGETS", None)
        else:
            os.environ["AOT_BUILD_TARGETS"] = saved
    stamp.write_text(digest)
    _log(f"built {wheel.name} in {time.perf_counter() - t:.0f} s")
    return wheel


def bench_venv(venv: Path, wheels: list[Path], torch_release: str) -> Path:
    """A venv with ``torch==torch_release`` and ``wheels`` (reinstalled when they change);
    returns its interpreter."""
    vpy = venv / "bin" / "python"
    if not vpy.exists():
        _log(f"creating {venv} with torch=={torch_release}")
        _run([sys.executable, "-m", "venv", str(venv)])
        _run([str(vpy), "-m", "pip", "install", "-q", f"torch=={torch_release}"])
    want = " ".join([*(_file_sha(w) for w in wheels), f"torch=={torch_release}"])
    stamp = venv / "bench.stamp"
    if not _stamp_ok(stamp, want):
        _log(f"installing {', '.join(w.name for w in wheels)} into {venv}")
        pip = [str(vpy), "-m", "pip", "install", "-q"]
        _run([*pip, "--force-reinstall", "--no-deps", *map(str, wheels)])
        _run([*pip, f"torch=={torch_release}", *map(str, wheels)])
        stamp.write_text(want)
    return vpy


def spawn(
    script: Path,
    mark: str,
    vpy: Path,
    mode: str,
    cfg: dict[str, Any],
    work: Path,
    *,
    compiler: bool,
    cache: Path | None = None,
    threads: int = 0,
    timeout: float = 900,
) -> dict[str, Any]:
    """``script --worker mode --config cfg`` in a fresh process of ``vpy``: neutral cwd,
    ``AOT_BUILD_STRICT=1``, Inductor cache ``cache`` (None: a new empty folder), and without
    ``compiler`` PATH limited to the venv's bin; ``threads``: OMP_NUM_THREADS (0: torch's
    default). Its result is the JSON line after ``mark``."""
    drop = ("PYTHON", "TORCH", "AOT_BUILD", "CC", "CXX")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PATH"] = str(vpy.parent)
    if compiler:
        env["PATH"] += os.pathsep + os.environ.get("PATH", "/usr/bin:/bin")
    env["VIRTUAL_ENV"] = str(vpy.parent.parent)
    env["AOT_BUILD_STRICT"] = "1"
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    (work / "tmp").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=work / "tmp", prefix=f"{mode}-") as tmp:
        inductor = cache or Path(tmp) / "inductor-cache"
        inductor.mkdir(parents=True, exist_ok=True)
        cwd = Path(tmp) / "cwd"
        cwd.mkdir()
        env["TORCHINDUCTOR_CACHE_DIR"] = str(inductor)
        env["TMPDIR"] = tmp
        cmd = [str(vpy), "-s", str(script), "--worker", mode, "--config", json.dumps(cfg)]
        t = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"mode": mode, "error": f"timed out after {timeout} s"}
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(mark)), None)
    if line is None:
        why = f"worker exited {proc.returncode} without a result\n{proc.stderr[-2500:]}"
        return {"mode": mode, "error": why}
    res: dict[str, Any] = json.loads(line[len(mark) :])
    res["process_wall_s"] = time.perf_counter() - t
    res["stderr_tail"] = proc.stderr[-1500:]
    return res


def _setup(args: argparse.Namespace, work: Path) -> tuple[Path, dict[str, Any]]:
    aot = aot_build_wheel(work, args.build_python)
    gen = work / "gen"
    (gen / PACKAGE).mkdir(parents=True, exist_ok=True)
    for path, text in ((gen / "pyproject.toml", PYPROJECT), (gen / PACKAGE / "__init__.py", MODULE)):
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
    salt = _stamp_text(work / "aot_build.stamp")
    items = [gen / "pyproject.toml", gen / PACKAGE]
    pkg = project_wheel(PACKAGE, items, work, args.build_python, args.targets, salt)
    vpy = bench_venv(work / "venv", [aot, pkg], args.torch)
    info = {"aot_build_wheel": str(aot), "package_wheel": str(pkg), "venv": str(vpy.parent.parent)}
    info["package_sha256"] = _file_sha(pkg)
    return vpy, info


def _stamp_text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in runs if "error" not in r]
    out: dict[str, Any] = {"runs": len(runs), "ok": len(ok)}
    for k in ("import_torch_ms", "import_pkg_ms", "setup_ms", "import_to_first_ms", "after_torch_ms"):
        out[k] = _med([r[k] for r in ok])
    for part in ("first", "second"):
        for k in ("forward_ms", "backward_ms", "step_ms"):
            out[f"{part}_{k}"] = _med([r[part][k] for r in ok])
    out["inductor_imported"] = sorted({r["inductor_imported_by_first_steps"] for r in ok})
    out["max_rel_diff"] = max((r["check"]["max_rel_diff"] for r in ok), default=None)
    errors = [r["error"] for r in runs if "error" in r]
    if errors:
        out["error"] = errors[0]
    return out


def render(report: dict[str, Any]) -> str:
    m, c = report["meta"], report["config"]
    out = [
        "### Run",
        "",
        f"- Date: {m['date']}",
        f"- Machine: `{m['cpu']}` ({m['nproc']} CPUs), `{m['platform']}`; Python {m['python']}, "
        f"torch {m['torch']}, "
        + (f"`OMP_NUM_THREADS={c['threads']}`" if c.get("threads") else "torch's default threads"),
        f"- Code: git HEAD `{m['git_head']}`"
        + (f", uncommitted changes: {', '.join(m['git_dirty_paths'])}" if m["git_dirty_paths"] else "")
        + f"; `{PACKAGE}` built for `{c['targets']}`",
        f"- Command: `{m['command']}`",
        f"- Load (`uptime`): before `{m['uptime_before']}`; after `{m['uptime_after']}`",
        f"- Checks: loss and every gradient equal eager's (`torch.allclose`, rtol {c['rtol']}, "
        f"atol {c['atol']}) for every contender before timing; `AOT_BUILD_STRICT=1`",
    ]
    out += [
        "",
        f"#### Steady state: one training step (µs, median of {c['rounds']} interleaved rounds, "
        "order rotated; ratio = median per-round ratio against eager)",
        "",
        "| entry | inputs | params | eager | torch.compile | aot_build | aot_build / eager | "
        "torch.compile / eager | aot_build / torch.compile | max rel. grad diff (aot_build, compile) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["steady"].items():
        if "error" in s:
            out.append(f"| `{name}` | failed: `{first_line(s['error'])}` |" + " |" * 8)
            continue
        med, r = s["median_us"], s["ratio_vs_eager"]
        per = s["per_call_us"]
        ac = statistics.median(x / y for x, y in zip(per["aot_build"], per["compile"], strict=True))
        out.append(
            f"| `{name}` | {s['inputs']} | {s['params']:,} | {number(med['eager'])} | "
            f"{number(med['compile'])} | {number(med['aot_build'])} | **{r['aot_build']:.2f}×** | "
            f"{r['compile']:.2f}× | {ac:.2f}× | {s['checks']['aot_build']['max_rel_diff']:.1e}, "
            f"{s['checks']['compile']['max_rel_diff']:.1e} |"
        )
    out += [
        "",
        f"#### First step in a fresh process (ms, medians; {c['runs']} runs, torch.compile "
        f"{c['slow_runs']}; empty Inductor cache)",
        "",
        "| entry | approach | runs ok | import torch | import→first backward done | same, after "
        "`import torch` | first forward | first backward | 2nd step | `torch._inductor` imported |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, per_app in report["first"].items():
        for a, label in APPROACHES.items():
            if a not in per_app:
                continue
            s = _summary(per_app[a])
            out.append(
                f"| `{name}` | {label} | {s['ok']}/{s['runs']} | {number(s['import_torch_ms'])} | "
                f"**{number(s['import_to_first_ms'])}** | {number(s['after_torch_ms'])} | "
                f"{number(s['first_forward_ms'])} | {number(s['first_backward_ms'])} | "
                f"{number(s['second_step_ms'], 2)} | {', '.join(map(str, s['inductor_imported'])) or '—'} |"
            )
            if s.get("error"):
                out.append(f"| | `{a}` failed: `{first_line(s['error'])}` |" + " |" * 8)
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="smoke run: 1 run each, few rounds")
    p.add_argument("--entries", default=",".join(ENTRIES), help="comma-separated subset of the entries")
    p.add_argument("--runs", type=int, help="first-step processes for eager and aot_build (default 5)")
    p.add_argument("--slow-runs", type=int, help="first-step processes for torch.compile (default 2)")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 21)")
    p.add_argument("--loop-ms", type=float, default=100.0, help="length of one timed loop")
    p.add_argument("--warmup", type=int, default=5, help="steps per contender before timing")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--atol", type=float, default=1e-5)
    p.add_argument("--threads", type=int, default=0, help="OMP_NUM_THREADS for the workers (0: default)")
    p.add_argument("--targets", default="cpu-avx2", help="AOT_BUILD_TARGETS for the package's build")
    p.add_argument("--no-first", action="store_true", help="skip the first-step processes")
    p.add_argument("--no-steady", action="store_true", help="skip the steady-state processes")
    add_build_options(p, REPO / "benchmarks" / ".work" / "training", _torch_release())
    args = p.parse_args(argv)
    if rendered(args, render):
        return 0
    entries = [e for e in args.entries.split(",") if e]
    if set(entries) - set(ENTRIES):
        p.error(f"unknown entries {sorted(set(entries) - set(ENTRIES))}; choose from {ENTRIES}")
    runs = args.runs or (1 if args.quick else 5)
    slow_runs = args.slow_runs or (1 if args.quick else 2)
    rounds = args.rounds or (3 if args.quick else 21)
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    vpy, info = _setup(args, work)
    meta = run_meta("aot_build")
    meta["uptime_before"] = uptime()
    _log(f"load before: {meta['uptime_before']}")
    batch = {"small_loss": 64, "mlp_loss": 256, "block": 8}
    base = {"rtol": args.rtol, "atol": args.atol}
    steady: dict[str, Any] = {}
    if not args.no_steady:
        for name in entries:
            _log(f"steady state: {name}")
            cfg = {
                **base,
                "entry": name,
                "batch": batch[name],
                "approaches": list(APPROACHES),
                "rounds": rounds,
                "loop_ms": args.loop_ms,
                "warmup": args.warmup,
            }
            r = spawn(HERE, RESULT_MARK, vpy, "steady", cfg, work, compiler=True, threads=args.threads)
            if "error" in r:
                _log(f"  failed: {first_line(r['error'])}")
            else:
                _log(f"  µs per step: {r['median_us']}; vs eager {r['ratio_vs_eager']}")
            steady[name] = r
    first: dict[str, dict[str, list[dict[str, Any]]]] = {n: {a: [] for a in APPROACHES} for n in entries}
    if not args.no_first:
        todo = {a: (slow_runs if a == "compile" else runs) for a in APPROACHES}
        for i in range(max(todo.values())):
            for name in entries:
                for a, n in todo.items():
                    if i >= n:
                        continue
                    cfg = {**base, "entry": name, "batch": batch[name], "approach": a}
                    cc = a != "aot_build"
                    r = spawn(HERE, RESULT_MARK, vpy, "first", cfg, work, compiler=cc, threads=args.threads)
                    msg = first_line(r["error"]) if "error" in r else f"{r['import_to_first_ms']:,.0f} ms"
                    _log(f"first step {i + 1}/{n} {name} {a}: {msg}")
                    first[name][a].append(r)
    meta["uptime_after"] = uptime()
    meta["loadavg_after"] = os.getloadavg()
    _log(f"load after: {meta['uptime_after']}")
    report = {
        "meta": meta,
        "config": {
            **base,
            "entries": entries,
            "batch": batch,
            "runs": runs,
            "slow_runs": slow_runs,
            "rounds": rounds,
            "loop_ms": args.loop_ms,
            "warmup": args.warmup,
            "targets": args.targets,
            "threads": args.threads,
        },
        "setup": info,
        "steady": steady,
        "first": first,
    }
    return publish(report, render(report), args.json, _log)


if __name__ == "__main__":
    dispatch(_worker, main)
