#!/usr/bin/env python3
"""What a compiled call costs on real models: the shim's overhead per call, the steady state
against a bare AOTInductor package and torch.compile, the first call against eager, and
importing the shim.

Usage (from the repository root, with the dev venv; diffusers for the UNet:
``.venv/bin/pip install -r benchmarks/requirements.txt``)::

    .venv/bin/python benchmarks/guard_cost.py [--models bert,vit] [--rounds N] [--first-runs N] [--json F]
    .venv/bin/python benchmarks/guard_cost.py --first-only --against 03904fc --first-runs 13
    .venv/bin/python benchmarks/guard_cost.py --render OUT.json

Models (random weights from small configs, one static input each; ``MODELS`` below):
transformers ``BertModel`` (2 layers, hidden 128), ``ViTModel`` (4 layers, hidden 192, 64x64
images), ``ResNetModel`` (ResNet-18's layout, 64x64 images); diffusers ``UNet2DModel`` (32x32,
two resolution levels, attention); torch.nn ``LSTM`` (2 layers, 64) and ``MultiheadAttention``
(64, 4 heads).

Method. One package with an entry per model is compiled for ``cpu-avx2`` by the build's own
child process (``python -m aot_build.compile``), and each function also as a bare
AOTInductor package (``torch.export`` of the same function, its weights baked in as
constants, ``aoti_compile_and_package``); both cached under ``--workdir``. Every measurement
runs in a fresh worker process (this file, ``--worker``) with ``AOT_BUILD_STRICT=1`` (a call
that fell back to Python would be an error, never a silently different number) under
``torch.no_grad()``:

* *steady state*, per model: eager (``entry.__wrapped__``), aot_build (``entry``), the bare
  library (the shim's own runner, ``runner.run`` on the very tensor tuple the shim passes it),
  the bare AOTInductor package (``aoti_load_package``), torch.compile (default mode, warmed
  up), and the shim's checks alone: guards on package state (``state``), arguments (``args``),
  weights' metadata (``weights``). Contenders alternate in rounds, medians of ``--rounds``.
  Overhead = median(aot_build) - median(bare library); the goal is 10 µs + 2 % of the latter.
* *first call*: ``--first-runs`` fresh processes per model and side; each imports torch and
  the package (not timed), then times one call: the entry (importing the shim, then bind:
  manifest, the entry's record, the guard tree, the evaluator, the weights, the library; then
  the call), eager, or the entry with the shim imported first (not timed), as the first call
  of a process's second entry finds it: what each further entry adds.
* *shim import*: fresh processes, after ``import torch``: ``import aot_build.load.shim``; and
  as a first call imports it: after ``import aot_build`` too, the collector paused.
* ``--against REV``: the first call and the shim import are also timed as git revision
  ``REV`` gives them: its ``aot_build/`` (exported under ``--workdir``) builds the same
  package again (its guard records and C evaluator) and runs it, each process of one side
  followed by one of the other. A first call varies by about a millisecond between runs of
  this benchmark on the 2-core machines here: compare a change with its parent this way, not
  across runs. ``--first-only`` skips the steady state. (REV's build reads this checkout's
  ``job.json``: a revision whose ``BuildConfig`` differs cannot be compared this way.)

aot_build's and the package's bytecode is written first (``compileall``, as pip does at
install), so that a machine with ``PYTHONDONTWRITEBYTECODE`` does not time compiling.

Run nothing else on the machine meanwhile; the load average before and after is printed.
"""

from __future__ import annotations

import argparse
import compileall
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
RESULT_MARK = "@@GUARD_COST_RESULT@@"
TARGET = "cpu-avx2"
PACKAGE = "bench_models"
#: Bump when the package's sources or how the AOTInductor packages are made change meaning.
BUILD_VERSION = 1

#: model name -> (source of its global and entry, example arguments as source)
MODELS: dict[str, tuple[str, str]] = {
    "bert": (
        """
from transformers import BertConfig, BertModel
BERT = BertModel(BertConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=512, vocab_size=1000)).eval()

@aot_entry(example_inputs=lambda: EXAMPLES["bert"])
def bert(ids):
    return BERT(ids).last_hidden_state
""",
        "(torch.randint(0, 1000, (2, 32)),)",
    ),
    "vit": (
        """
from transformers import ViTConfig, ViTModel
VIT = ViTModel(ViTConfig(hidden_size=192, num_hidden_layers=4, num_attention_heads=3,
                         intermediate_size=768, image_size=64, patch_size=8)).eval()

@aot_entry(example_inputs=lambda: EXAMPLES["vit"])
def vit(pixels):
    return VIT(pixels).last_hidden_state
""",
        "(torch.randn(2, 3, 64, 64),)",
    ),
    "resnet": (
        """
from transformers import ResNetConfig, ResNetModel
RESNET = ResNetModel(ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2],
                                  hidden_sizes=[64, 128, 256, 512])).eval()

@aot_entry(example_inputs=lambda: EXAMPLES["resnet"])
def resnet(pixels):
    return RESNET(pixels).last_hidden_state
""",
        "(torch.randn(2, 3, 64, 64),)",
    ),
    "unet": (
        """
from diffusers import UNet2DModel
UNET = UNet2DModel(sample_size=32, in_channels=3, out_channels=3, layers_per_block=1,
                   block_out_channels=(32, 64), norm_num_groups=8,
                   down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                   up_block_types=("AttnUpBlock2D", "UpBlock2D")).eval()

@aot_entry(example_inputs=lambda: EXAMPLES["unet"])
def unet(sample, timestep):
    return UNET(sample, timestep).sample
""",
        "(torch.randn(2, 3, 32, 32), torch.tensor([10, 10]))",
    ),
    "lstm": (
        """
LSTM = torch.nn.LSTM(64, 64, num_layers=2, batch_first=True).eval()

@aot_entry(example_inputs=lambda: EXAMPLES["lstm"])
def lstm(x):
    return LSTM(x)[0]
""",
        "(torch.randn(2, 16, 64),)",
    ),
    "mha": (
        """
MHA = torch.nn.MultiheadAttention(64, 4, batch_first=True).eval()

@aot_entry(example_inputs=lambda: EXAMPLES["mha"])
def mha(x):
    return MHA(x, x, x, need_weights=False)[0]
""",
        "(torch.randn(2, 16, 64),)",
    ),
}


def package_files(models: list[str]) -> dict[str, str]:
    examples = ",\n".join(f"    {m!r}: {MODELS[m][1]}" for m in models)
    body = "".join(MODELS[m][0] for m in models)
    source = (
        '"""Real models, one entry each (benchmarks/guard_cost.py)."""\n\nimport torch\n\n'
        "from aot_build import aot_entry\n\ntorch.manual_seed(0)\n\n"
        f"EXAMPLES = {{\n{examples},\n}}\n{body}"
    )
    return {"__init__.py": '"""Benchmark models."""\n', "models.py": source}


# --------------------------------------------------------------------------------------------
# Worker side (fresh interpreter)
# --------------------------------------------------------------------------------------------


def _models(cfg: dict[str, Any]) -> Any:
    import importlib

    sys.path.insert(0, cfg["site"])
    return importlib.import_module(f"{PACKAGE}.models")


def _examples(mod: Any, name: str) -> tuple[Any, ...]:
    import torch

    torch.manual_seed(1234)
    return tuple(mod.EXAMPLES[name])


def _w_aoti(cfg: dict[str, Any]) -> dict[str, Any]:
    """The bare AOTInductor package of one model's function, weights baked in."""
    import torch

    mod = _models(cfg)
    fn = getattr(mod, cfg["model"]).__wrapped__

    class Whole(torch.nn.Module):
        def forward(self, *args: Any) -> Any:
            return fn(*args)

    t = time.perf_counter()
    with torch.no_grad():
        ep = torch.export.export(Whole(), _examples(mod, cfg["model"]), strict=False)
        torch._inductor.aoti_compile_and_package(ep, package_path=cfg["pt2"])
    return {"seconds": time.perf_counter() - t}


def _shim_parts(entry: Any, args: tuple[Any, ...]) -> dict[str, Callable[[], object]]:
    """The bare library call and the shim's checks, on the very tensors the shim passes."""
    import torch

    entry(*args)
    bound = entry._call
    (v,) = bound.variants
    runner = v.runner(torch.device("cpu"))
    run = getattr(runner, "run", runner)  # 0.4: the library's run function; 0.3: the runner
    r = v.check.fast(None, *args)
    if type(r) is int:
        raise RuntimeError(f"{entry.key}: the argument check failed ({r})")
    if hasattr(v, "state_check"):  # aot-build 0.4: guard tree and held weights
        held = v.state_check(None)
        tensors = r + held.tensors
        state, weights = v.state, held.tensors
        return {
            "bare": lambda: run(tensors),
            "state": lambda: state.check(None, weights),
            "args": lambda: v.check.fast(None, *args),
            "weights": lambda: held.metadata.check(*weights),
            "native": lambda: state.native,
        }
    # aot-build 0.3: one generated check for arguments, guards and weights
    return {"bare": lambda: run(r), "check": lambda: v.check.fast(None, *args)}


def _w_steady(cfg: dict[str, Any]) -> dict[str, Any]:
    import torch

    mod = _models(cfg)
    name = cfg["model"]
    entry = getattr(mod, name)
    args = _examples(mod, name)
    res: dict[str, Any] = {"model": name, "num_threads": torch.get_num_threads()}
    with torch.no_grad():
        eager = entry.__wrapped__
        parts = _shim_parts(entry, args)
        res["native_evaluator"] = bool(parts.pop("native", lambda: None)())
        ref = eager(*args)
        if not same_result(torch, entry(*args), ref):
            raise RuntimeError(f"{name}: aot_build's result differs from eager")
        fns: dict[str, Callable[[], object]] = {
            "eager": lambda: eager(*args),
            "aot_build": lambda: entry(*args),
        }
        fns["bare_library"] = parts.pop("bare")
        if cfg.get("pt2"):
            package = torch._inductor.aoti_load_package(cfg["pt2"])
            if not same_result(torch, package(*args), ref):
                raise RuntimeError(f"{name}: the AOTInductor package's result differs from eager")
            fns["aoti_package"] = lambda: package(*args)
        if cfg.get("compile"):
            compiled = torch.compile(eager)
            t = time.perf_counter()
            compiled(*args)
            res["compile_first_call_s"] = time.perf_counter() - t
            if not same_result(torch, compiled(*args), ref):
                raise RuntimeError(f"{name}: torch.compile's result differs from eager")
            fns["torch_compile"] = lambda: compiled(*args)
        fns.update(parts)
        for f in fns.values():
            for _ in range(cfg["warmup"]):
                f()
        res.update(interleaved(fns, cfg["rounds"], cfg["loop_ms"]))
        state = entry._call.variants[0].variant
        tree = getattr(state, "state", None)
        res["guards"] = sum(tree.count().values()) if tree is not None else len(state.guards)
        res["paths"] = len(tree.nodes) if tree is not None else None
        res["weights"] = len(tree.weights) if tree is not None else len(state.weights)
    return res


def _w_first(cfg: dict[str, Any]) -> dict[str, Any]:
    import torch

    mod = _models(cfg)
    entry = getattr(mod, cfg["model"])
    args = _examples(mod, cfg["model"])
    fn = entry if cfg["side"] in ("aot_build", "entry") else entry.__wrapped__
    if cfg["side"] == "entry":  # an entry called after another: the shim is imported already
        from aot_build import collector

        with collector.paused():
            import aot_build.load.shim  # noqa: F401
    with torch.no_grad():
        t = time.perf_counter()
        fn(*args)
        first = time.perf_counter() - t
    return {"first_ms": first * 1e3}


def _w_import(cfg: dict[str, Any]) -> dict[str, Any]:
    """``import_ms``: the shim after ``import torch`` alone (aot_build's package included);
    ``in_call_ms``: after ``import aot_build`` too, as a first call imports it (the user's
    package has imported aot_build; the collector is paused, as ``AotEntry._bind`` does)."""
    import torch  # noqa: F401

    if not cfg.get("in_call"):
        t = time.perf_counter()
        import aot_build.load.shim

        return {"import_ms": (time.perf_counter() - t) * 1e3}
    from aot_build import collector

    with collector.paused():
        t = time.perf_counter()
        import aot_build.load.shim  # noqa: F401

        return {"in_call_ms": (time.perf_counter() - t) * 1e3}


def _worker(mode: str, cfg: dict[str, Any]) -> None:
    workers = {"aoti": _w_aoti, "steady": _w_steady, "first": _w_first, "import": _w_import}
    try:
        res = workers[mode](cfg)
    except Exception as exc:
        res = {"mode": mode, "error": error_text(exc)}
    emit_result(RESULT_MARK, res)


# --------------------------------------------------------------------------------------------
# Driver side
# --------------------------------------------------------------------------------------------

_log = logger("guard_cost")


def spawn(mode: str, cfg: dict[str, Any], work: Path, timeout: float = 1800) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AOT_BUILD", "TORCHINDUCTOR"))}
    env["AOT_BUILD_STRICT"] = "1"
    env["TORCHINDUCTOR_CACHE_DIR"] = str(work / "inductor-cache")
    env["PYTHONPATH"] = str(cfg.get("root", REPO)) if cfg.get("source_tree", True) else ""
    cwd = work / "cwd"
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(HERE), "--worker", mode, "--config", json.dumps(cfg)]
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"mode": mode, "error": f"timed out after {timeout} s"}
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith(RESULT_MARK)), None)
    if line is None:
        return {"mode": mode, "error": f"no result (exit {proc.returncode}): {proc.stderr[-3000:]}"}
    out: dict[str, Any] = json.loads(line[len(RESULT_MARK) :])
    return out


def render(report: dict[str, Any]) -> str:
    meta = report["meta"]
    lines = [
        f"guard_cost.py, {meta['date']}, {meta['cpu']} ({meta['nproc']} cores), torch {meta['torch']}, "
        f"commit {meta['git_head']}; load {meta['loadavg_before'][0]:.2f} before, "
        f"{report['loadavg_after'][0]:.2f} after; medians of {report['rounds']} rounds, µs per call",
        "",
        "| model | guards / paths | weights | eager | aot_build | bare library | overhead (goal) | "
        "AOTI package | torch.compile | aot_build / AOTI | aot_build / compile | state check | args "
        "| weights |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if not report["steady"]:  # --first-only
        lines = lines[:1]
    for name, r in report["steady"].items():
        if "error" in r:
            lines.append(f"| {name} | error: {first_line(r['error'])} |")
            continue
        m = r["median_us"]
        bare = m["bare_library"]
        over = m["aot_build"] - bare
        goal = 10 + 0.02 * bare
        aoti, comp = m.get("aoti_package"), m.get("torch_compile")
        lines.append(
            f"| {name} | {r['guards']:,} / {r['paths'] or '—'} | {r['weights']} | {number(m['eager'])} | "
            f"{number(m['aot_build'])} | {number(bare)} | {number(over)} ({number(goal)}) | {number(aoti)} | "
            f"{number(comp)} | {number(m['aot_build'] / aoti, 2) if aoti else '—'} | "
            f"{number(m['aot_build'] / comp, 2) if comp else '—'} | "
            f"{number(m.get('state', m.get('check')))} | {number(m.get('args'))} | "
            f"{number(m.get('weights'))} |"
        )
    rev = report.get("against")
    if report["first"]:  # not with --first-runs 0
        lines += [
            "",
            "| model | first call, eager (ms) | first call, aot_build (ms) | over eager (ms) | "
            "shim imported already: over eager (ms) |"
            + (f" at {rev}: aot_build (ms) | at {rev}: over eager (ms) |" if rev else ""),
            "|---|---|---|---|---|" + ("---|---|" if rev else ""),
        ]
    for name, r in report["first"].items():
        if "error" in r:
            lines.append(f"| {name} | error: {first_line(r['error'])} |")
            continue
        then = (
            f" {number(r['against'], 2)} | {number(r['against'] - r['eager'], 2)} |" if "against" in r else ""
        )
        entry = f" {number(r['entry'] - r['eager'], 2)} |" if "entry" in r else " — |"
        lines.append(
            f"| {name} | {number(r['eager'], 2)} | {number(r['aot_build'], 2)} | "
            f"{number(r['aot_build'] - r['eager'], 2)} |{entry}{then}"
        )
    imp = report.get("import")
    if imp:
        lines += ["", f"importing aot_build.load.shim after torch: median {number(imp, 2)} ms"]
    in_call = report.get("import_in_call")
    if in_call:
        lines += [
            f"importing it as a first call does (after import aot_build, collector paused): "
            f"median {number(in_call, 2)} ms"
            + (f" (at {rev}: {number(report['import_in_call_against'], 2)} ms)" if rev else "")
        ]
    return "\n".join(lines)


def export_revision(rev: str, work: Path) -> Path:
    """``rev``'s ``aot_build/`` (``git archive``) under ``work``; reused when already there."""
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    dest = work / f"against-{sha[:12]}"
    if not (dest / "aot_build" / "__init__.py").is_file():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", sha, "aot_build"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--loop-ms", type=float, default=100.0)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--first-runs", type=int, default=5)
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument("--no-aoti", action="store_true", help="leave the bare AOTInductor package out")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/bench-guard-cost"))
    p.add_argument("--rebuild", action="store_true")
    p.add_argument("--json", type=Path)
    p.add_argument("--render", type=Path, help="print the tables of a --json file; measure nothing")
    p.add_argument(
        "--against", metavar="REV", help="also time first calls as git revision REV builds and runs them"
    )
    p.add_argument("--first-only", action="store_true", help="first call and shim import only")
    args = p.parse_args()
    if args.render:
        print(render(json.loads(args.render.read_text())))
        return 0
    models = [m for m in args.models.split(",") if m]
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        p.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    work = args.workdir
    work.mkdir(parents=True, exist_ok=True)
    meta = run_meta("aot_build", "benchmarks")
    salt = f"{BUILD_VERSION}\0{compile_side_hash()}"
    site = build_package(PACKAGE, package_files(models), [TARGET], work, salt, args.rebuild)
    # bytecode, as pip writes it at install: imports are timed, not compiles
    against = export_revision(args.against, work) if args.against else None
    # REV's side: its run path on the package its own build side makes (evaluator included)
    against_site = (
        build_package(
            PACKAGE, package_files(models), [TARGET], against, against.name, args.rebuild, root=against
        )
        if against
        else None
    )
    for folder in (
        REPO / "aot_build",
        site,
        *([against / "aot_build", against_site] if against_site else []),
    ):
        compileall.compile_dir(str(folder), quiet=1)
    report: dict[str, Any] = {"meta": meta, "rounds": args.rounds, "steady": {}, "first": {}}
    if args.against:
        report["against"] = args.against
    base = {"site": str(site), "rounds": args.rounds, "loop_ms": args.loop_ms, "warmup": args.warmup}
    # side -> worker config: eager, this checkout, and REV's run path on the same package
    sides: dict[str, dict[str, Any]] = {
        "eager": {"side": "eager"},
        "aot_build": {"side": "aot_build"},
        "entry": {"side": "entry"},
    }
    if against:
        sides["against"] = {"side": "aot_build", "root": str(against), "site": str(against_site)}
    for name in models:
        pt2 = ""
        if not args.no_aoti and not args.first_only:
            pt2 = str(work / "aoti" / f"{name}-{salt.encode().hex()[:12]}-{site.name}.pt2")
            if not Path(pt2).is_file():
                Path(pt2).parent.mkdir(exist_ok=True)
                _log(f"{name}: compiling the bare AOTInductor package")
                made = spawn("aoti", {**base, "model": name, "pt2": pt2}, work)
                if "error" in made:
                    _log(f"{name}: AOTInductor package failed: {first_line(made['error'])}")
                    pt2 = ""
        if not args.first_only:
            _log(f"{name}: steady state")
            report["steady"][name] = spawn(
                "steady", {**base, "model": name, "pt2": pt2, "compile": not args.no_compile}, work
            )
        if not args.first_runs:
            continue
        _log(f"{name}: first calls")
        firsts: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.first_runs):
            for side in firsts:
                r = spawn("first", {**base, "model": name, **sides[side]}, work)
                if "error" in r:
                    report["first"][name] = r
                    break
                firsts[side].append(r["first_ms"])
        if name not in report["first"]:
            report["first"][name] = {k: statistics.median(v) for k, v in firsts.items()}
            report["first"][name]["runs"] = firsts
    if args.first_runs:
        imports = [spawn("import", dict(base), work).get("import_ms") for _ in range(max(3, args.first_runs))]
        report["import"] = statistics.median([i for i in imports if i is not None] or [0.0])
        in_call = [
            spawn("import", dict(base, in_call=True), work).get("in_call_ms")
            for _ in range(max(3, args.first_runs))
        ]
        report["import_in_call"] = statistics.median([i for i in in_call if i is not None] or [0.0])
        if against:
            then = [
                spawn("import", dict(base, in_call=True, root=str(against)), work).get("in_call_ms")
                for _ in range(max(3, args.first_runs))
            ]
            report["import_in_call_against"] = statistics.median([i for i in then if i is not None] or [0.0])
    report["loadavg_after"] = os.getloadavg()
    return publish(report, render(report), args.json, _log)


if __name__ == "__main__":
    dispatch(_worker, main)
