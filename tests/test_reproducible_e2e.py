"""Reproducible wheels, end to end: two real isolated ``python -m build --wheel`` runs of
example_pkg (conftest ``cold_wheels``: different source folders, isolated environments and
Inductor cache folders, both from empty caches) give byte-identical wheels."""

from __future__ import annotations

import zipfile

from conftest import ColdWheel


def test_two_cold_builds_give_byte_identical_wheels(cold_wheels: tuple[ColdWheel, ColdWheel]) -> None:
    one, two = cold_wheels
    for cold in cold_wheels:  # cold: nothing from the cache; really parallel; a line per compile
        assert "0 hit(s), 12 compiled" in cold.log, cold.log[-3000:]
        assert "compiling 12 program(s) in 2 worker process(es)" in cold.log
        assert "[12/12] " in cold.log
    with zipfile.ZipFile(one.wheel) as a, zipfile.ZipFile(two.wheel) as b:
        names = a.namelist()
        assert names == b.namelist()
        assert sum(n.endswith(".so") for n in names) == 12
        differ = [n for n in names if a.read(n) != b.read(n)]
        assert differ == [], f"files that differ between the builds: {differ}"
        assert len({zi.date_time for zi in a.infolist()}) == 1  # all from SOURCE_DATE_EPOCH
    assert one.wheel.name == two.wheel.name
    assert one.wheel.read_bytes() == two.wheel.read_bytes()
