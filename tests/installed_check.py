"""Exercise an installed package the way its users do; run by test_e2e.py.

Runs with the interpreter of a fresh virtual environment, from a neutral directory, with
PATH holding only that environment's bin folder. Prints one line ``RESULT: {json}`` with the
facts test_e2e.py asserts on. Usage: ``python installed_check.py SCENARIO [ARG]``.

Only the standard library and torch are used here: the environment has nothing else.
"""

from __future__ import annotations

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


def traced(entry: Any, *args: Any) -> tuple[Any, bool]:
    """Call ``entry``; True when its Python function ran (no artifact answered)."""
    code = entry.__wrapped__.__code__
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


def close(actual: Any, expected: Any) -> str | None:
    """None when equal within float tolerance, else why not."""
    try:
        torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)
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
    expected = entry.__wrapped__(*args)
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
    small = torch.randn(2, 32, 64)
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
        example_pkg.mlp_block(torch.randn(2, 32, 64))
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

    out["uncovered"], _ = call(example_pkg.mlp_block, torch.randn(2, 32, 64))
    return out


def scenario_damaged(workdir: str) -> dict[str, Any]:
    """Damage mlp_block's artifact in a copy of the installed package put first on sys.path."""
    installed = package_dir("example_pkg")
    copy_root = Path(workdir) / "patched"
    shutil.copytree(installed, copy_root / "example_pkg", ignore=shutil.ignore_patterns("__pycache__"))
    manifest = json.loads((copy_root / "example_pkg" / "_aot_build" / "manifest.json").read_text())
    files = {
        key: [a["file"] for v in e["variants"] for a in v["artifacts"]]
        for key, e in manifest["entries"].items()
    }
    (victim,) = files["example_pkg.blocks:mlp_block"]
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
    return out


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


SCENARIOS: dict[str, Callable[[str], dict[str, Any]]] = {
    name.removeprefix("scenario_"): fn for name, fn in globals().items() if name.startswith("scenario_")
}


if __name__ == "__main__":
    result = SCENARIOS[sys.argv[1]](sys.argv[2] if len(sys.argv) > 2 else "")
    print("RESULT: " + json.dumps(result), flush=True)
