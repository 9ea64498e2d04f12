"""Exercise an installed package the way its users do; run by test_e2e.py.

Runs with the interpreter of a fresh virtual environment, from a neutral directory, with
PATH holding only that environment's bin folder. Prints one line ``RESULT: {json}`` with the
facts test_e2e.py asserts on. Usage: ``python installed_check.py SCENARIO [ARG]``.

Only the standard library and torch are used here: the environment has nothing else.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import torch

torch.manual_seed(1234)

X = torch.randn(4, 32, 64)
IMAGES = torch.rand(8, 3, 64, 64) * 255


def package_dir(name: str) -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.submodule_search_locations, name
    return Path(next(iter(spec.submodule_search_locations)))


def listing(root: Path) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            st = path.stat()
            out[str(path.relative_to(root))] = [st.st_size, st.st_mtime_ns]
    return out


def changes(before: dict[str, list[int]], after: dict[str, list[int]]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def python_function(entry: Any) -> Any:
    """What an entry runs as plain Python: the function, or for a module whose ``forward``
    is a method entry, that method bound to the module."""
    if isinstance(entry, torch.nn.Module):
        fn = type(entry).forward.__wrapped__
        return lambda *args, **kwargs: fn(entry, *args, **kwargs)
    return entry.__wrapped__


def _code(entry: Any) -> Any:
    return (type(entry).forward if isinstance(entry, torch.nn.Module) else entry).__wrapped__.__code__


def traced(entry: Any, *args: Any) -> tuple[Any, bool]:
    """Call ``entry``; True when its Python function ran (no artifact answered)."""
    code = _code(entry)
    hits: list[bool] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code:
            hits.append(True)

    sys.setprofile(profile)
    try:
        out = entry(*args)
    finally:
        sys.setprofile(None)
    return out, bool(hits)


def _comparable(value: Any) -> Any:
    """Dataclasses and strings in a form torch.testing.assert_close compares."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {k: _comparable(v) for k, v in vars(value).items()}
        return {"__type__": _comparable(type(value).__qualname__), **fields}
    if isinstance(value, str):
        return [ord(c) for c in value]
    if isinstance(value, dict):  # the caller compared the types already
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_comparable(v) for v in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_comparable(v) for v in value)
    return value


def close(actual: Any, expected: Any) -> str | None:
    """None when equal (same types, float tolerance), else why not."""
    if type(actual) is not type(expected):
        return f"type {type(actual).__qualname__} differs from eager's {type(expected).__qualname__}"
    try:
        torch.testing.assert_close(_comparable(actual), _comparable(expected), rtol=1e-4, atol=1e-5)
    except AssertionError as exc:
        return str(exc)
    return None


def flat_tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in flat_tensors(v)]
    if isinstance(value, dict):
        return [t for k in sorted(value) for t in flat_tensors(value[k])]
    return []


def same_values(a: Any, b: Any) -> bool:
    ta, tb = flat_tensors(a), flat_tensors(b)
    return len(ta) == len(tb) and all(
        x.shape == y.shape and torch.allclose(x, y) for x, y in zip(ta, tb, strict=True)
    )


def call(entry: Any, *args: Any, previous: Any = None) -> tuple[dict[str, Any], Any]:
    """Call an entry and its Python function on the same arguments; describe the call."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, ran = traced(entry, *args)
    expected = python_function(entry)(*args)
    facts: dict[str, Any] = {
        "ran_python": ran,
        "warnings": [
            {"category": w.category.__name__, "message": str(w.message), "file": w.filename} for w in caught
        ],
        "mismatch": close(out, expected),
        "type": type(out).__name__,
    }
    if previous is not None:
        facts["changed"] = not same_values(out, previous)
    return facts, out


def example_calls() -> dict[str, tuple[Any, tuple[Any, ...]]]:
    import example_pkg

    return {
        "mlp_block": (example_pkg.mlp_block, (X,)),
        "attention_block": (example_pkg.attention_block, (X,)),
        "normalize": (example_pkg.normalize, (IMAGES,)),
        "split_heads_stats": (example_pkg.split_heads_stats, (X, 4)),
    }


def scenario_covered(_: str) -> dict[str, Any]:
    dirs = {"example_pkg": package_dir("example_pkg"), "aot_build": package_dir("aot_build")}
    before = {k: listing(d) for k, d in dirs.items()}
    cache = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    import aot_build
    import example_pkg

    calls = {}
    for name, (entry, args) in example_calls().items():
        calls[name], _ = call(entry, *args)
    # a second round: bound entries stay compiled and silent
    second = {name: call(entry, *args)[0] for name, (entry, args) in example_calls().items()}
    after = {k: listing(d) for k, d in dirs.items()}
    return {
        "compilers": {c: shutil.which(c) for c in ("g++", "gcc", "cc", "c++", "clang")},
        "path": os.environ.get("PATH"),
        "example_pkg_file": example_pkg.__file__,
        "aot_build_file": aot_build.__file__,
        "package_dirs": {k: str(d) for k, d in dirs.items()},
        "artifacts": sorted(p.name for p in (dirs["example_pkg"] / "_aot_build").iterdir()),
        "calls": calls,
        "second": second,
        "cache_dir_exists": cache.exists(),
        "cache_contents": sorted(str(p.relative_to(cache)) for p in cache.rglob("*"))
        if cache.exists()
        else [],
        "changed_files": {k: changes(before[k], after[k]) for k in dirs},
        "torch": torch.__version__,
        "torch_lib": str(Path(torch.__file__).parent / "lib"),
        "libgomp": mapped_libraries("libgomp"),
    }


def scenario_weights(_: str) -> dict[str, Any]:
    import example_pkg.blocks as blocks

    out: dict[str, Any] = {}
    base = blocks.mlp_block(X)
    g = torch.Generator().manual_seed(99)
    state = {k: torch.randn(v.shape, generator=g) * 0.2 for k, v in blocks.MLP.state_dict().items()}
    blocks.MLP.load_state_dict(state)
    out["load_state_dict"], after_load = call(blocks.mlp_block, X, previous=base)
    with torch.no_grad():
        blocks.MLP.up.weight.mul_(3.0)
    out["mul_"], _ = call(blocks.mlp_block, X, previous=after_load)
    att_before = blocks.attention_block(X)
    blocks.TEMPERATURE = torch.tensor(2.0)
    out["temperature"], _ = call(blocks.attention_block, X, previous=att_before)
    # attention_block reads MLP too: the new MLP weights reach it as well
    fresh = {k: torch.randn(v.shape, generator=g) * 0.2 for k, v in blocks.ATTENTION.state_dict().items()}
    att_before = blocks.attention_block(X)
    blocks.ATTENTION.load_state_dict(fresh)
    out["attention_load_state_dict"], _ = call(blocks.attention_block, X, previous=att_before)
    return out


def scenario_fallback(_: str) -> dict[str, Any]:
    import example_pkg

    out: dict[str, Any] = {}
    small = torch.randn(2, 16, 64)
    out["mlp_first"], _ = call(example_pkg.mlp_block, small)
    out["mlp_second"], _ = call(example_pkg.mlp_block, small)
    out["mlp_covered_after"], _ = call(example_pkg.mlp_block, X)
    out["heads_first"], _ = call(example_pkg.split_heads_stats, X, 2)
    out["heads_second"], _ = call(example_pkg.split_heads_stats, X, 2)
    out["normalize_small"], _ = call(example_pkg.normalize, torch.rand(2, 3, 16, 16) * 255)
    return out


def scenario_strict(_: str) -> dict[str, Any]:
    import example_pkg
    from aot_build.errors import FallbackError

    out: dict[str, Any] = {"strict_env": os.environ.get("AOT_BUILD_STRICT")}
    out["covered"], _ = call(example_pkg.mlp_block, X)
    try:
        example_pkg.mlp_block(torch.randn(2, 16, 64))
    except FallbackError as exc:
        out["raised"] = {"type": type(exc).__name__, "module": type(exc).__module__, "message": str(exc)}
    else:
        out["raised"] = None
    return out


def scenario_disable(_: str) -> dict[str, Any]:
    out: dict[str, Any] = {"disable_env": os.environ.get("AOT_BUILD_DISABLE")}
    for name, (entry, args) in example_calls().items():
        out[name], _ = call(entry, *args)
    import example_pkg

    out["uncovered"], _ = call(example_pkg.mlp_block, torch.randn(2, 16, 64))
    return out


def scenario_damaged(workdir: str) -> dict[str, Any]:
    """Damage mlp_block's artifact in a copy of the installed package put first on sys.path."""
    installed = package_dir("example_pkg")
    copy_root = Path(workdir) / "patched"
    shutil.copytree(installed, copy_root / "example_pkg", ignore=shutil.ignore_patterns("__pycache__"))
    from aot_build.manifest import Manifest
    from aot_build.targets import best_cpu_target

    manifest = Manifest.read(copy_root / "example_pkg" / "_aot_build" / "manifest.json")
    files = {key: [a.file for v in e.variants for a in v.artifacts] for key, e in manifest.entries.items()}
    # the artifact this CPU loads for the variant that serves X (batch 4, not pinned to size 1)
    variants = manifest.entries["example_pkg.blocks:mlp_block"].variants
    (served,) = [v for v in variants if not v.size_one]
    by_target = {a.target: a.file for a in served.artifacts}
    victim = by_target[best_cpu_target(set(by_target)) or ""]
    path = copy_root / "example_pkg" / "_aot_build" / victim
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x5A
    path.write_bytes(bytes(data))
    sys.path.insert(0, str(copy_root))
    import example_pkg

    out: dict[str, Any] = {"imported_from": example_pkg.__file__, "victim": victim}
    out["damaged"], _ = call(example_pkg.mlp_block, X)
    out["damaged_again"], _ = call(example_pkg.mlp_block, X)
    out["intact"], _ = call(example_pkg.attention_block, X)
    out["shares_victim"] = [
        k for k, v in files.items() if victim in v and k != "example_pkg.blocks:mlp_block"
    ]
    return out


def scenario_host(_: str) -> dict[str, Any]:
    import example_pkg

    out: dict[str, Any] = {"capability": torch.backends.cpu.get_cpu_capability()}
    out["mlp"], _ = call(example_pkg.mlp_block, X)
    out["loaded"] = example_pkg.mlp_block.loaded_target()
    return out


def mapped_libraries(fragment: str) -> list[str]:
    """Files mapped into this process whose name contains ``fragment`` (/proc/self/maps)."""
    with open("/proc/self/maps") as fh:
        return sorted({line.split()[-1] for line in fh if fragment in line and "/" in line})


def scenario_srcpkg(_: str) -> dict[str, Any]:
    import srcpkg.helpers
    from srcpkg.ops import fused

    x = torch.randn(4, 8)
    out: dict[str, Any] = {"file": fused.__file__}
    base = {name: getattr(fused, name)(x) for name in ("fused", "fused_direct")}
    for name in ("fused", "fused_direct"):
        out[f"{name}_before"], _ = call(getattr(fused, name), x)
    srcpkg.helpers.SCALE = torch.linspace(-3.0, 3.0, 8)
    for name in ("fused", "fused_direct"):
        out[f"{name}_after"], _ = call(getattr(fused, name), x, previous=base[name])
    with torch.no_grad():
        srcpkg.helpers.SCALE.mul_(-2.0)
    out["fused_in_place"], _ = call(fused.fused, x)
    return out


def scenario_editable(_: str) -> dict[str, Any]:
    import editable_pkg

    out: dict[str, Any] = {"file": editable_pkg.__file__}
    out["covered_shape"], _ = call(editable_pkg.scaled, torch.randn(4))
    out["other_shape"], _ = call(editable_pkg.scaled, torch.randn(9, 4))
    return out


def _rows(b: int, s: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(b * 1000 + s)
    return torch.randn(b, s, 8, generator=g), (torch.rand(b, s, generator=g) > 0.3).float()


def scenario_signatures(_: str) -> dict[str, Any]:
    """Calls that must run compiled (run with AOT_BUILD_STRICT=1: a fallback raises)."""
    import sig_pkg.blocks as blocks
    import sig_pkg.calls as calls
    import sig_pkg.dyn as dyn
    import sig_pkg.state as state

    out: dict[str, Any] = {}
    for b in (1, 2, 17, 33, 64):
        out[f"scale_rows/{b}"], _ = call(dyn.scale_rows, torch.randn(b, 16))
    for b, s in ((1, 1), (1, 7), (3, 1), (5, 100), (64, 128), (2, 2)):
        out[f"masked_mean/{b}x{s}"], _ = call(dyn.masked_mean, *_rows(b, s))
    for b in (1, 3):
        out[f"squeeze_trap/{b}"], _ = call(dyn.squeeze_trap, torch.randn(b, 8))
        out[f"branch_on_one/{b}"], _ = call(dyn.branch_on_one, torch.randn(b, 8))
        out[f"doubled/{b}"], _ = call(dyn.doubled, torch.randn(b, 8), torch.randn(2 * b, 8))
    for b in (6, 100):
        out[f"auto_dim/{b}"], _ = call(dyn.auto_dim, torch.randn(b, 8))
    x, m = torch.randn(4, 8), (torch.rand(4, 8) > 0.5).float()
    out["masked(x)"], _ = call(calls.masked, x)
    out["masked(x, m)"], _ = call(calls.masked, x, m)
    out["masked(x, mask=m)"] = call_kw(calls.masked, (x,), {"mask": m})
    out["masked(x, None, 1.0)"], _ = call(calls.masked, x, None, 1.0)
    for name, t in (
        ("f32", torch.randn(3, 5)),
        ("f64", torch.randn(3, 5, dtype=torch.float64)),
        ("3d", torch.randn(2, 3, 5)),
    ):
        out[f"by_dtype/{name}"], _ = call(calls.by_dtype, t)
    plain = calls.plain_outputs(torch.randn(4, 6))
    out["plain_outputs"] = [type(v).__name__ for v in plain] + [repr(v) for v in plain[1:]]
    xs = torch.randn(5, 6)
    res = calls.structured(xs)
    out["structured_types"] = {
        "stats": type(res["stats"]).__qualname__,
        "result": type(res["result"]).__qualname__,
        "count": res["stats"].count,
        "label": res["result"].label,
        "same_is_input": res["same"] is xs,
        "list": type(res["list"][1]).__name__,
    }
    out["structured"], _ = call(calls.structured, xs)
    with torch.no_grad():
        block = blocks.Block(64).eval()
        for b in (1, 2, 32):
            out[f"block/{b}"], _ = call(block, torch.randn(b, 16, 64))
        other = blocks.Block(64).eval()  # another instance: its own weights
        out["block/other-instance"], _ = call(
            other, torch.randn(3, 16, 64), previous=block(torch.randn(3, 16, 64))
        )
        for name in ("scaled", "act", "seq", "tied", "pipe", "two_scales", "attr_scale", "dropped", "normed"):
            out[f"state/{name}"], _ = call(getattr(state, name), torch.randn(4, 8))
        state.PIPE.unet = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        out["state/pipe-new-unet"], _ = call(state.pipe, torch.randn(4, 8))
        state.helpers.SCALE = torch.linspace(-1.0, 1.0, 8)
        out["state/attr_scale-new"], _ = call(state.attr_scale, torch.randn(4, 8))
    # traced or transformed callers: the entry is plain torch code to them (no error in strict mode)
    batched = torch.vmap(dyn.scale_rows)(torch.randn(5, 3, 16))
    out["vmap_shape"] = list(batched.shape)
    compiled = torch.compile(lambda t: dyn.scale_rows(t) + 1, fullgraph=True, backend="eager")
    out["compile_matches"] = bool(
        torch.allclose(compiled(x16 := torch.randn(3, 16)), dyn.scale_rows.__wrapped__(x16) + 1)
    )

    class Caller(torch.nn.Module):
        def forward(self, t: torch.Tensor) -> torch.Tensor:
            return dyn.scale_rows(t) * 2

    ep = torch.export.export(Caller(), (torch.randn(3, 16),))
    out["export_ops"] = sorted({str(n.target) for n in ep.graph.nodes if n.op == "call_function"})
    return out


def call_kw(entry: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = _code(entry)
        hits: list[bool] = []
        sys.setprofile(lambda f, e, a: hits.append(True) if e == "call" and f.f_code is code else None)
        try:
            got = entry(*args, **kwargs)
        finally:
            sys.setprofile(None)
    return {
        "ran_python": bool(hits),
        "warnings": [{"category": w.category.__name__, "message": str(w.message)} for w in caught],
        "mismatch": close(got, entry.__wrapped__(*args, **kwargs)),
    }


def scenario_signature_fallbacks(_: str) -> dict[str, Any]:
    """Calls no artifact covers, and package state changed after import: each must fall back
    with one warning naming what differs, and equal eager."""
    import sig_pkg.blocks as blocks
    import sig_pkg.calls as calls
    import sig_pkg.dyn as dyn
    import sig_pkg.helpers as helpers
    import sig_pkg.state as state

    out: dict[str, Any] = {}
    out["batch-65"], _ = call(dyn.scale_rows, torch.randn(65, 16))
    out["seq-129"], _ = call(dyn.masked_mean, *_rows(2, 129))
    out["non-contiguous"], _ = call(dyn.scale_rows, torch.randn(16, 8).t())
    out["dtype"], _ = call(calls.by_dtype, torch.randn(3, 5, dtype=torch.float16))
    out["scale=2.0"] = call_kw(calls.masked, (torch.randn(4, 8),), {"scale": 2.0})
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out["autocast"], _ = call(dyn.scale_rows, torch.randn(3, 16))
    with torch.no_grad():
        x = torch.randn(4, 8)
        out["block-heads"], _ = call(blocks.Block(64, heads=8).eval(), torch.randn(2, 16, 64))
        out["block-subclass"], _ = call(blocks.WideBlock(64).eval(), torch.randn(2, 16, 64))
        state.TEMP = 3.0
        out["global-scalar"], _ = call(state.scaled, x)
        state.ACT.kind = "sigmoid"
        out["module-attribute"], _ = call(state.act, x)
        state.SEQ[1] = torch.nn.Tanh()
        out["submodule-class"], _ = call(state.seq, x)
        state.TIED[1].weight = torch.nn.Parameter(torch.randn(8, 8))
        out["untied"], _ = call(state.tied, x)
        helpers.SCALE = torch.ones(8)
        out["two-paths"], _ = call(state.two_scales, x)
        state.DROP.train()
        torch.manual_seed(0)
        out["train-mode"] = dropout_call(state.dropped, x)
        state.NORM.eps = 0.5
        out["eps"], _ = call(state.normed, x)
        handle = state.NORM.register_forward_hook(lambda mod, args, result: result * 2)
        state.NORM.eps = 1e-5
        out["hook"], _ = call(state.normed, x)
        handle.remove()
        out["hook-removed"], _ = call(state.normed, x)
    return out


def dropout_call(entry: Any, x: torch.Tensor) -> dict[str, Any]:
    """Dropout in train mode is random: compare with eager under the same seed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.manual_seed(7)
        got, ran = traced(entry, x)
    torch.manual_seed(7)
    expected = entry.__wrapped__(x)
    return {
        "ran_python": ran,
        "warnings": [{"category": w.category.__name__, "message": str(w.message)} for w in caught],
        "mismatch": close(got, expected),
    }


def scenario_hf(_: str) -> dict[str, Any]:
    """Models of transformers (random weights from configs), with ids and an attention mask."""
    import hf_pkg.models as models

    out: dict[str, Any] = {}
    torch.set_grad_enabled(False)
    for b, s in ((1, 1), (1, 64), (16, 1), (16, 64), (3, 17), (2, 12)):
        ids = torch.randint(0, 1000, (b, s))
        mask = torch.ones(b, s, dtype=torch.long)
        mask[0, s // 2 :] = 0
        out[f"encode/{b}x{s}"], res = call(models.encode, ids, mask)
        out[f"gpt2/{b}x{s}"], _ = call(models.next_token_logits, ids)
    out["encode_type"] = type(res).__qualname__
    ids = torch.randint(0, 1000, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.long)
    before = models.encode(ids, mask)
    g = torch.Generator().manual_seed(5)
    models.BERT.load_state_dict(
        {k: torch.randn(v.shape, generator=g) * 0.05 for k, v in models.BERT.state_dict().items()}
    )
    out["encode/new-weights"], _ = call(models.encode, ids, mask, previous=before)
    return out


def scenario_hf_fallbacks(_: str) -> dict[str, Any]:
    import hf_pkg.models as models

    out: dict[str, Any] = {}
    torch.set_grad_enabled(False)
    out["batch-17"], _ = call(
        models.encode, torch.randint(0, 1000, (17, 4)), torch.ones(17, 4, dtype=torch.long)
    )
    models.BERT.config.output_hidden_states = True
    out["config-flag"], res = call(
        models.encode, torch.randint(0, 1000, (2, 4)), torch.ones(2, 4, dtype=torch.long)
    )
    out["hidden_states"] = res.hidden_states is not None
    return out


SCENARIOS: dict[str, Callable[[str], dict[str, Any]]] = {
    name.removeprefix("scenario_"): fn for name, fn in globals().items() if name.startswith("scenario_")
}


if __name__ == "__main__":
    result = SCENARIOS[sys.argv[1]](sys.argv[2] if len(sys.argv) > 2 else "")
    print("RESULT: " + json.dumps(result), flush=True)
