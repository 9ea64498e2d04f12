"""Reproducible wheels and the build cache, end to end: two real isolated ``python -m build``
runs of example_pkg (conftest ``cold_wheels``: one from the source folder, one from the sdist,
in different folders, isolated environments and Inductor cache folders, both from empty
caches) give byte-identical wheels; a rebuild with one entry changed compiles that entry
only."""

from __future__ import annotations

import zipfile
from pathlib import Path

from conftest import cold_build
from helpers import BuiltDists


def test_two_cold_builds_give_byte_identical_wheels(cold_wheels: tuple[BuiltDists, BuiltDists]) -> None:
    one, two = cold_wheels
    for cold in cold_wheels:  # cold: nothing from the cache; really parallel; a line per compile
        assert "0 hit(s), 12 compiled" in cold.log, cold.log[-3000:]
        assert "compiling 12 program(s) in 2 worker process(es)" in cold.log
        assert "[12/12] " in cold.log
    with zipfile.ZipFile(one.wheel) as a, zipfile.ZipFile(two.wheel) as b:
        names = a.namelist()
        assert names == b.namelist()
        assert sum(n.endswith(".so") for n in names) == 12 + 1  # the libraries, the guard evaluator
        differ = [n for n in names if a.read(n) != b.read(n)]
        assert differ == [], f"files that differ between the builds: {differ}"
        assert len({zi.date_time for zi in a.infolist()}) == 1  # all from SOURCE_DATE_EPOCH
    assert one.wheel.name == two.wheel.name
    assert one.wheel.read_bytes() == two.wheel.read_bytes()


def test_one_entry_changed_recompiles_only_that_entry(
    cold_wheels: tuple[BuiltDists, BuiltDists], e2e_dir: Path, aot_build_wheel: Path
) -> None:
    """A rebuild of the first cold build's source with one entry edited, in another
    environment (the dev one, ``--no-isolation``: torch and aot-build at other paths) with
    that build's cache: the edited entry's two libraries compile, the other ten come from the
    cache, and the wheel differs only there."""
    root = e2e_dir / "cold-a"
    src = root / "example_pkg"
    pre = src / "example_pkg" / "preprocess.py"
    text = pre.read_text(encoding="utf-8")
    edited = text.replace("return (images - mean) / std", "return (images - mean) / std * 2.0")
    assert edited != text
    pre.write_text(edited, encoding="utf-8")
    rebuilt = cold_build(root, aot_build_wheel, "inductor-cache-2", isolated=False)
    log = rebuilt.log
    assert "10 hit(s), 2 compiled" in log, log[-3000:]
    assert "example_pkg.preprocess:normalize [cpu-avx2] compiled in" in log
    assert "example_pkg.blocks:mlp_block [cpu-avx2] from the build cache" in log
    with zipfile.ZipFile(cold_wheels[0].wheel) as a, zipfile.ZipFile(rebuilt.wheel) as b:
        libs_a = {n for n in a.namelist() if n.endswith(".so")}
        libs_b = {n for n in b.namelist() if n.endswith(".so")}
    assert len(libs_a - libs_b) == 2 and len(libs_b - libs_a) == 2  # normalize, two targets
