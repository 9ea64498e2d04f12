"""Reproducible wheels, end to end: two real isolated ``python -m build --wheel`` runs of
example_pkg from different source folders, with empty build and Inductor caches and a
different number of compile workers, give byte-identical wheels."""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path

from helpers import EXAMPLE_PROJECT, build_env, copy_project, run

EPOCH = "1700000000"
TARGETS = "cpu-avx2,cpu-baseline"


def _build(tmp_path: Path, aot_build_wheel: Path, name: str, *extra: str, **env: str) -> tuple[Path, str]:
    src = copy_project(EXAMPLE_PROJECT, tmp_path / name / "example_pkg")
    out = tmp_path / name / "dist"
    environ = build_env(
        aot_build_wheel.parent,
        SOURCE_DATE_EPOCH=EPOCH,
        AOT_BUILD_TARGETS=TARGETS,
        AOT_BUILD_CACHE_DIR=str(tmp_path / name / "aot-build-cache"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / name / "inductor-cache"),
        **env,
    )
    proc = run([sys.executable, "-m", "build", "--wheel", "--outdir", out, *extra, "."], cwd=src, env=environ,
               timeout=1800)
    (wheel,) = out.glob("*.whl")
    return wheel, proc.stdout + proc.stderr


def test_two_cold_builds_give_byte_identical_wheels(tmp_path: Path, aot_build_wheel: Path) -> None:
    one, log1 = _build(tmp_path, aot_build_wheel, "a", "-C--build-option=--aot-build-jobs=1")
    two, log2 = _build(tmp_path, aot_build_wheel, "b", AOT_BUILD_JOBS="2")
    # cold (nothing from the cache), and really with one and with two workers
    assert "0 hit(s), 12 compiled" in log1 and "0 hit(s), 12 compiled" in log2, log1[-3000:]
    assert "in 1 worker process(es)" in log1 and "in 2 worker process(es)" in log2
    assert "[12/12] " in log1 and "[12/12] " in log2  # one progress line per program and target
    with zipfile.ZipFile(one) as a, zipfile.ZipFile(two) as b:
        names = a.namelist()
        assert names == b.namelist()
        assert sum(n.endswith(".so") for n in names) == 12
        differ = [n for n in names if a.read(n) != b.read(n)]
        assert differ == [], f"files that differ between the builds: {differ}"
        times = {zi.date_time for zi in a.infolist()}
    assert len(times) == 1  # every timestamp from SOURCE_DATE_EPOCH
    assert one.name == two.name
    assert hashlib.sha256(one.read_bytes()).hexdigest() == hashlib.sha256(two.read_bytes()).hexdigest()
