"""The build cache: what its key covers, atomic entries checked on read, LRU eviction, and a
rebuild that compiles nothing when nothing changed."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers import SAMPLE_PROJECTS

from aot_build.backends import Built, aoti
from aot_build.build_config import BuildConfig
from aot_build.compile.cache import BuildCache
from aot_build.compile.driver import run
from aot_build.compile.units import program_bytes
from aot_build.discover import list_modules
from aot_build.manifest import Manifest
from aot_build.settings import Settings, cache_dir, parse_size
from aot_build.targets import parse_target

AOTI = ("aoti", "1")


class Affine(torch.nn.Module):
    def __init__(self, bias: float) -> None:
        super().__init__()
        self.bias = bias

    def forward(self, args: tuple[torch.Tensor], weights: tuple[torch.Tensor]) -> torch.Tensor:
        return torch.tanh(args[0] @ weights[0]) + torch.full((8,), self.bias)


def _ep(bias: float = 1.0, seed: int = 0) -> bytes:
    torch.manual_seed(seed)  # example values differ between builds; the key must not
    ep = torch.export.export(Affine(bias), ((torch.randn(4, 8),), (torch.randn(8, 8),)), strict=False)
    return program_bytes(ep)


def test_key_covers_what_shapes_the_library(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path)
    base = parse_target("cpu-baseline", "x86_64")
    key = cache.key(_ep(), base, {}, True, AOTI)
    assert cache.key(_ep(seed=1), base, {}, True, AOTI) == key  # other example values: same program
    assert cache.key(_ep(bias=2.0), base, {}, True, AOTI) != key  # an embedded constant changed
    assert cache.key(_ep(), parse_target("cpu-avx2", "x86_64"), {}, True, AOTI) != key
    assert cache.key(_ep(), base, {"max_autotune": True}, True, AOTI) != key
    assert cache.key(_ep(), base, {}, False, AOTI) != key


def _built(tmp_path: Path, data: bytes = b"\x7fELF library bytes") -> Built:
    import hashlib

    path = tmp_path / "lib.so"
    path.write_bytes(data)
    return Built(path, hashlib.sha256(data).hexdigest(), len(data), "AVX2")


def test_round_trip_and_damaged_entry(tmp_path: Path) -> None:
    cache = BuildCache(tmp_path / "cache")
    built = _built(tmp_path)
    cache.put("ab" * 32, built)
    out = tmp_path / "out"
    out.mkdir()
    got = cache.get("ab" * 32, out)
    assert got is not None and got.sha256 == built.sha256 and got.isa == "AVX2"
    assert got.path.read_bytes() == built.path.read_bytes() and got.path.parent == out
    assert cache.get("cd" * 32, out) is None
    lib = tmp_path / "cache" / "ab" / ("ab" * 32) / "lib.so"
    lib.write_bytes(b"flipped")
    assert cache.get("ab" * 32, out) is None  # damaged: never handed out
    assert not lib.parent.exists()  # and removed, so the next build stores a good one
    assert not list((tmp_path / "cache").glob("*/.tmp-*"))  # no half-written entries left


def test_least_recently_used_entries_are_evicted(tmp_path: Path) -> None:
    import os

    cache = BuildCache(tmp_path / "cache", max_bytes=10**9)
    for i, key in enumerate(["aa" * 32, "bb" * 32, "cc" * 32]):
        cache.put(key, _built(tmp_path, bytes([i]) * 1000))
        os.utime(tmp_path / "cache" / key[:2] / key, (1000 + i, 1000 + i))
    cache.get("aa" * 32, tmp_path)  # used last now
    cache.max_bytes = 2500
    cache.evict()
    left = sorted(p.name[:2] for p in (tmp_path / "cache").glob("??/*"))
    assert left == ["aa", "cc"]


def test_settings_and_location(tmp_path: Path) -> None:
    assert parse_size("5GB") == 5 * 10**9 and parse_size("500 MiB") == 500 * 2**20 and parse_size("x") is None
    s = Settings()
    assert cache_dir(s, tmp_path, {"XDG_CACHE_HOME": "/x"}) == Path("/x/aot-build")
    assert cache_dir(s, tmp_path, {"AOT_BUILD_CACHE_DIR": "/y"}) == Path("/y")
    assert cache_dir(Settings(cache_dir="c"), tmp_path, {}) == tmp_path / "c"
    assert cache_dir(Settings(cache=False), tmp_path, {"AOT_BUILD_CACHE_DIR": "/y"}) is None


def _compile(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str], **job: Any
) -> tuple[Manifest, str]:
    build_lib = tmp_path / "build_lib"
    if not build_lib.exists():
        shutil.copytree(SAMPLE_PROJECTS / "shim_pkg", build_lib, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / f"out{len(list(tmp_path.glob('out*')))}"
    out.mkdir()
    job = BuildConfig(
        build_lib=str(build_lib),
        packages=["shim_pkg"],
        modules=list_modules(build_lib, ["shim_pkg"], []),
        targets=["cpu-baseline"],
        out_dir=str(out),
        cache_dir=str(cache),
        **job,
    )
    for name in [n for n in sys.modules if n.startswith("shim_pkg")]:
        del sys.modules[name]
    try:
        assert run(job) == 0
    finally:
        sys.path.remove(str(build_lib))
        for name in [n for n in sys.modules if n.startswith("shim_pkg")]:
            del sys.modules[name]
    manifest = Manifest.read(out / "shim_pkg" / "_aot_build" / "manifest.json")
    return manifest, capsys.readouterr().out


def test_rebuild_compiles_only_what_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """No change: nothing compiled, the same libraries. One entry changed: that entry's
    library compiled again, the other's from the cache (every entry is exported again)."""
    cache = tmp_path / "cache"
    first, log1 = _compile(tmp_path, cache, capsys)
    assert "[cpu-baseline] compiled in" in log1 and "0 hit(s), 2 compiled" in log1

    def no_compiler(*a: Any, **k: Any) -> Any:
        raise AssertionError("compiled although nothing changed")

    monkeypatch.setattr(aoti, "compile_library", no_compiler)  # the build process compiles nothing
    second, log2 = _compile(tmp_path, cache, capsys)
    assert "[2/2] shim_pkg.ops:energy [cpu-baseline] from the build cache" in log2
    assert "2 hit(s), 0 compiled" in log2 and "worker" not in log2
    assert second == first  # the same manifest and libraries, byte for byte
    monkeypatch.undo()

    ops = tmp_path / "build_lib" / "shim_pkg" / "ops.py"
    ops.write_text(ops.read_text().replace("(x * x).sum()", "(x * x).sum() * 2"), encoding="utf-8")
    third, log3 = _compile(tmp_path, cache, capsys)
    assert "1 hit(s), 1 compiled" in log3
    assert "shim_pkg.ops:affine [cpu-baseline] from the build cache" in log3
    assert "shim_pkg.ops:energy [cpu-baseline] compiled in" in log3
    affine = [a.file for v in third.entries["shim_pkg.ops:affine"].variants for a in v.artifacts]
    energy = [a.file for v in third.entries["shim_pkg.ops:energy"].variants for a in v.artifacts]
    before = [a.file for v in first.entries["shim_pkg.ops:energy"].variants for a in v.artifacts]
    assert set(affine) <= set(first.files) and energy != before

    quiet, log4 = _compile(tmp_path, cache, capsys, progress=False)
    assert quiet == third and "2 hit(s), 0 compiled" in log4
    assert "[1/2]" not in log4 and "from the build cache in" not in log4  # no line per program
