"""The compile driver's checks that need no compiler: arguments, targets, example inputs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from aot_build import aot_entry
from aot_build.compile.driver import Job, _Compiler, main
from aot_build.errors import CompileError


@aot_entry(example_inputs=lambda: (torch.zeros(2), object()))
def bad_leaf(x: torch.Tensor, y: Any) -> torch.Tensor:
    return x


def _explode() -> tuple[Any, ...]:
    raise KeyError("dataset")


@aot_entry(example_inputs=_explode)
def bad_callable(x: torch.Tensor) -> torch.Tensor:
    return x


@aot_entry(example_inputs=lambda: torch.zeros(2))
def not_a_tuple(x: torch.Tensor) -> torch.Tensor:
    return x


def _job(tmp_path: Path, **kw: Any) -> Job:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    fields: dict[str, Any] = {
        "build_lib": str(tmp_path),
        "packages": [],
        "modules": [],
        "targets": ["cpu"],
        "out_dir": str(out),
    }
    fields.update(kw)
    return Job(**fields)


def test_main_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["a.json", "b.json"]) == 2
    assert "usage: python -m aot_build.compile CONFIG.json" in capsys.readouterr().err


def test_main_reports_unknown_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "job.json"
    config.write_text(json.dumps(vars(_job(tmp_path, targets=["cpu-avx9"]))))
    assert main([str(config)]) == 1
    err = capsys.readouterr().err
    assert "aot-build: error: [tool.aot-build] targets: unknown target 'cpu-avx9'" in err
    assert "cpu-baseline" in err  # lists the valid ones


def test_main_without_entries_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "drv_empty_pkg").mkdir()
    (tmp_path / "drv_empty_pkg" / "__init__.py").write_text("X = 1\n")
    job = _job(tmp_path, packages=["drv_empty_pkg"], modules=["drv_empty_pkg"])
    config = tmp_path / "job.json"
    config.write_text(json.dumps(vars(job)))
    try:
        assert main([str(config)]) == 0
    finally:
        sys.modules.pop("drv_empty_pkg", None)
    assert "no @aot_entry functions found in 1 modules" in capsys.readouterr().out
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA device")
def test_cuda_target_without_gpu_is_an_error(tmp_path: Path) -> None:
    compiler = _Compiler(_job(tmp_path, targets=["cpu-baseline", "cuda-sm90"]))
    with pytest.raises(CompileError) as info:
        compiler.usable_targets()
    msg = str(info.value)
    assert "cuda-sm90" in msg and "no CUDA device" in msg
    assert 'optional-targets = ["cuda-sm90"]' in msg


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA device")
def test_optional_cuda_target_is_skipped_and_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = _job(tmp_path, targets=["cpu-baseline", "cuda-sm90"], optional_targets=["cuda-sm90"])
    compiler = _Compiler(job)
    assert [t.name for t in compiler.usable_targets()] == ["cpu-baseline"]
    reason = "no CUDA device on the build machine; build it with a GPU of compute capability 9.0"
    assert compiler.skipped == [{"target": "cuda-sm90", "reason": reason}]
    assert compiler.header().skipped_targets == compiler.skipped
    assert "skipping optional target cuda-sm90" in capsys.readouterr().out


def _compile(tmp_path: Path, entry: Any) -> CompileError:
    compiler = _Compiler(_job(tmp_path, build_lib=str(Path(__file__).parent)))
    compiler.programs = tmp_path
    with pytest.raises(CompileError) as info:
        compiler.export_entry(entry, ["cpu"])
    return info.value


def test_unsupported_example_leaf(tmp_path: Path) -> None:
    msg = str(_compile(tmp_path, bad_leaf))
    assert msg.startswith(f"{__name__}:bad_leaf ({Path(__file__).name}:")
    assert "example argument" in msg and "is a object" in msg
    assert "fix example_inputs" in msg


def test_example_inputs_callable_raises(tmp_path: Path) -> None:
    msg = str(_compile(tmp_path, bad_callable))
    assert f"{__name__}:bad_callable" in msg
    assert "example_inputs() raised KeyError" in msg


def test_example_inputs_not_a_tuple(tmp_path: Path) -> None:
    msg = str(_compile(tmp_path, not_a_tuple))
    assert f"{__name__}:not_a_tuple" in msg
    assert "must give a tuple" in msg and "got Tensor" in msg
    assert "list of such tuples" in msg


def test_failed_entry_leaves_no_manifest(tmp_path: Path) -> None:
    _compile(tmp_path, bad_leaf)
    assert not list((tmp_path / "out").rglob("manifest.json"))
    assert not list((tmp_path / "out").rglob("*.so"))


def test_every_failing_entry_is_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """One build names every broken entry, not only the first, and writes nothing."""
    import aot_build.compile.driver as driver

    monkeypatch.setattr(
        driver, "discover_entries", lambda modules, packages, root: [bad_leaf, bad_callable, not_a_tuple]
    )
    compiler = _Compiler(_job(tmp_path, build_lib=str(Path(__file__).parent), targets=["cpu-baseline"]))
    with pytest.raises(CompileError) as info:
        compiler.run()
    msg = str(info.value)
    assert msg.startswith("3 of 3 entries failed to compile")
    err = capsys.readouterr().err
    for name in ("bad_leaf", "bad_callable", "not_a_tuple"):
        assert f"{__name__}:{name} ({Path(__file__).name}:" in msg
        assert f"aot-build: error: {__name__}:{name}" in err  # each error in full, as it happened
    assert not list((tmp_path / "out").rglob("manifest.json"))
