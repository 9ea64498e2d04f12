"""Compile workers: a failing compile names its entry and target, stops the compiles not
started yet and leaves no artifacts; workers load programs that use the package's own
operators."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Compiled
from helpers import SAMPLE_PROJECTS

from aot_build.build_config import BuildConfig
from aot_build.compile.driver import run
from aot_build.discover import list_modules
from aot_build.errors import CompileError


def _run(tmp_path: Path, **kw: Any) -> None:
    build_lib = tmp_path / "build_lib"
    shutil.copytree(SAMPLE_PROJECTS / "shim_pkg", build_lib, ignore=shutil.ignore_patterns("__pycache__"))
    fields: dict[str, Any] = {
        "build_lib": str(build_lib),
        "packages": ["shim_pkg"],
        "modules": list_modules(build_lib, ["shim_pkg"], []),
        "targets": ["cpu-baseline", "cpu-avx2"],
        "out_dir": str(tmp_path / "out"),
        **kw,
    }
    (tmp_path / "out").mkdir()
    for name in [n for n in sys.modules if n.startswith("shim_pkg")]:
        del sys.modules[name]
    try:
        run(BuildConfig(**fields))
    finally:
        sys.path.remove(str(build_lib))
        for name in [n for n in sys.modules if n.startswith("shim_pkg")]:
            del sys.modules[name]


def test_a_failing_compile_names_entry_and_target_and_stops_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An option Inductor does not have fails every compile, in the worker, after export.
    with pytest.raises(CompileError) as info:
        _run(tmp_path, inductor_options={"no_such_inductor_option": 1}, jobs=1)
    msg = str(info.value)
    assert "compile(s) failed (each error is above); the others were stopped" in msg
    assert "no artifacts were written" in msg
    assert "shim_pkg.ops:affine (shim_pkg/ops.py:17) [cpu-baseline]" in msg
    err = capsys.readouterr().err
    assert "the aoti backend could not compile it" in err and "no_such_inductor_option" in err
    # one worker: the first failure cancels the three compiles queued behind it
    assert err.count("the aoti backend could not compile it") == 1
    assert not list((tmp_path / "out").rglob("*"))  # nothing written


def test_a_build_leaves_nothing_in_the_temp_folder(compiled: Compiled) -> None:
    """Three targets compiled in worker processes with TMPDIR an empty folder of the test's:
    empty again after the build. Inductor's precompiled headers (~0.15 GB each, one per
    target and torch path) went to ``$TMPDIR/torchinductor_<user>`` and stayed there."""
    assert "compiled in" in compiled.log
    assert compiled.temp_left == []
