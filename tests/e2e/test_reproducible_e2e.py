"""Reproducible wheels and the build cache, end to end, on example_pkg: the cold build
(conftest ``cold_wheel``: empty caches) compiles every program in parallel; the wheel built
from the sdist in other folders and isolated environments from a copy of its build cache
(conftest ``example_dists``) takes every program from the cache and is the same wheel, byte
for byte; a rebuild with one entry changed compiles that entry only. Two cold builds giving
the same wheel: test_bazel's ``test_bazel_wheel_is_the_python_build_wheel`` (Bazel's cold
build, in its own folders and caches, against ``cold_wheel``)."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import cold_build, cold_root
from helpers import BuiltDists


def test_cold_build_compiles_every_program_in_parallel(cold_wheel: BuiltDists) -> None:
    log = cold_wheel.log
    assert "0 hit(s), 12 compiled" in log, log[-3000:]
    assert "compiling 12 program(s) in 2 worker process(es)" in log
    assert "[12/12] " in log
    with zipfile.ZipFile(cold_wheel.wheel) as zf:
        assert sum(n.endswith(".so") for n in zf.namelist()) == 12 + 1  # the libraries, the guard evaluator
        assert len({zi.date_time for zi in zf.infolist()}) == 1  # all from SOURCE_DATE_EPOCH
        # the build imported the project from its build folder: no bytecode of it ships
        assert not [n for n in zf.namelist() if "__pycache__" in n or n.endswith(".pyc")]


def test_sdist_wheel_from_the_cache_is_the_cold_wheel(cold_wheels: tuple[BuiltDists, BuiltDists]) -> None:
    one, two = cold_wheels
    assert "12 hit(s), 0 compiled" in two.log, two.log[-3000:]
    with zipfile.ZipFile(one.wheel) as a, zipfile.ZipFile(two.wheel) as b:
        names = a.namelist()
        assert names == b.namelist()
        differ = [n for n in names if a.read(n) != b.read(n)]
        assert differ == [], f"files that differ between the builds: {differ}"
    assert one.wheel.name == two.wheel.name
    assert one.wheel.read_bytes() == two.wheel.read_bytes()


def test_one_entry_changed_recompiles_only_that_entry(
    cold_wheel: BuiltDists,
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    aot_build_wheel: Path,
) -> None:
    """A rebuild of a copy of the cold build's source with one entry edited, in another
    environment (the dev one, ``--no-isolation``: torch and aot-build at other paths) with a
    copy of that build's cache: the edited entry's two libraries compile, the other ten come
    from the cache, and the wheel differs only there."""
    root = tmp_path / "cold-a"
    for part in ("example_pkg", "aot-build-cache"):
        shutil.copytree(cold_root(tmp_path_factory) / part, root / part, symlinks=True)
    pre = root / "example_pkg" / "example_pkg" / "preprocess.py"
    text = pre.read_text(encoding="utf-8")
    edited = text.replace("return (images - mean) / std", "return (images - mean) / std * 2.0")
    assert edited != text
    pre.write_text(edited, encoding="utf-8")
    rebuilt = cold_build(root, aot_build_wheel, "inductor-cache-2", isolated=False)
    log = rebuilt.log
    assert "10 hit(s), 2 compiled" in log, log[-3000:]
    assert "example_pkg.preprocess:normalize [cpu-avx2] compiled in" in log
    assert "example_pkg.blocks:mlp_block [cpu-avx2] from the build cache" in log
    with zipfile.ZipFile(cold_wheel.wheel) as a, zipfile.ZipFile(rebuilt.wheel) as b:
        libs_a = {n for n in a.namelist() if n.endswith(".so")}
        libs_b = {n for n in b.namelist() if n.endswith(".so")}
    assert len(libs_a - libs_b) == 2 and len(libs_b - libs_a) == 2  # normalize, two targets
