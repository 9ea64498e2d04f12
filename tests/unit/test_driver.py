"""The compile driver's checks that need no compiler: arguments, targets, example inputs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from aot_build import aot_entry
from aot_build.build_config import BuildConfig
from aot_build.compile.build import manifest_header, usable_targets
from aot_build.compile.driver import main, run
from aot_build.compile.export import Exporter
from aot_build.errors import CompileError
from aot_build.targets import parse_target


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


def _job(tmp_path: Path, **kw: Any) -> BuildConfig:
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
    return BuildConfig(**fields)


def test_main_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["a.json", "b.json"]) == 2
    assert "usage: python -m aot_build.compile CONFIG.json" in capsys.readouterr().err


def test_main_reports_unknown_target(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "job.json"
    config.write_text(json.dumps(_job(tmp_path, targets=["cpu-avx9"]).to_json()))
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
    config.write_text(json.dumps(job.to_json()))
    try:
        assert main([str(config)]) == 0
    finally:
        sys.modules.pop("drv_empty_pkg", None)
    assert "no @aot_entry functions found in 1 modules" in capsys.readouterr().out
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA device")
def test_cuda_target_without_gpu_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CompileError) as info:
        usable_targets([parse_target("cpu-baseline"), parse_target("cuda-sm90")], [])
    msg = str(info.value)
    assert "cuda-sm90" in msg and "no CUDA device" in msg
    assert 'optional-targets = ["cuda-sm90"]' in msg


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA device")
def test_optional_cuda_target_is_skipped_and_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    both = [parse_target("cpu-baseline"), parse_target("cuda-sm90")]
    targets, skipped = usable_targets(both, ["cuda-sm90"])
    assert [t.name for t in targets] == ["cpu-baseline"]
    reason = "no CUDA device on the build machine; build it with a GPU of compute capability 9.0"
    assert skipped == [{"target": "cuda-sm90", "reason": reason}]
    assert manifest_header(skipped).skipped_targets == skipped
    assert "skipping optional target cuda-sm90" in capsys.readouterr().out


def _compile(tmp_path: Path, entry: Any) -> CompileError:
    exporter = Exporter(Path(__file__).parent, "aoti", tmp_path)
    with pytest.raises(CompileError) as info:
        exporter.export_entry(entry, ["cpu"])
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
    with pytest.raises(CompileError) as info:
        run(_job(tmp_path, build_lib=str(Path(__file__).parent), targets=["cpu-baseline"]))
    msg = str(info.value)
    assert msg.startswith("3 of 3 entries failed to compile")
    err = capsys.readouterr().err
    for name in ("bad_leaf", "bad_callable", "not_a_tuple"):
        assert f"{__name__}:{name} ({Path(__file__).name}:" in msg
        assert f"aot-build: error: {__name__}:{name}" in err  # each error in full, as it happened
    assert not list((tmp_path / "out").rglob("manifest.json"))


def test_build_config_round_trips_through_json(tmp_path: Path) -> None:
    from aot_build.settings import Settings

    settings = Settings(targets=["cpu-avx2"], inductor_options={"max_autotune": True}, strip=False)
    config = BuildConfig.from_settings(
        settings, build_lib=tmp_path, packages=["p"], modules=["p.m"], jobs=3, cache_dir=tmp_path / "c"
    )
    assert config.targets == ("cpu-avx2",) and config.jobs == 3 and config.strip is False
    assert config.inductor_options == {"max_autotune": True}
    assert config.cache_dir == str(tmp_path / "c") and config.cache_max_bytes == 5 * 10**9
    assert config.backend == settings.rule
    assert BuildConfig.from_json(json.dumps(config.to_json())) == config
    path = tmp_path / "job.json"
    config.write(path)
    assert BuildConfig.read(path) == config
    assert BuildConfig.from_settings(settings, build_lib=tmp_path, targets=["cpu"]).targets == ("cpu",)


def test_build_config_refuses_unknown_keys_and_versions(tmp_path: Path) -> None:
    from aot_build.errors import ConfigError

    body = _job(tmp_path).to_json()
    with pytest.raises(ConfigError, match="unknown key 'inductor_option'; did you mean 'inductor_options'"):
        BuildConfig.from_json({**body, "inductor_option": {}})
    with pytest.raises(ConfigError, match="version 0; this aot_build reads version 1"):
        BuildConfig.from_json({**body, "config_version": 0})
    legacy = {k: v for k, v in body.items() if k != "config_version"}  # a dict of an older aot_build
    path = tmp_path / "old.json"
    path.write_text(json.dumps(legacy))
    with pytest.raises(ConfigError, match=f"{path}: build configuration version None"):
        BuildConfig.read(path)


def test_unit_files_round_trip_with_their_backend(tmp_path: Path) -> None:
    """The interchange files of the separate steps (python -m aot_build export|compile|assemble,
    the Bazel rules) keep each program's backend and its version."""
    from aot_build.backends import Built
    from aot_build.compile.units import Compiled, ExportedEntry, Task, read_compiled, write_compiled
    from aot_build.manifest import Entry

    exported = ExportedEntry(
        "pkg", Entry("pkg.mod", "f", "pkg/mod.py:3"), [{"cpu": "a.pt2"}], "pkg.mod:f", "dynamo"
    )
    exported.write(tmp_path)
    again = ExportedEntry.read(tmp_path)
    assert (again.backend, again.key, again.programs, again.where) == (
        "dynamo",
        "pkg.mod:f",
        [{"cpu": "a.pt2"}],
        "pkg.mod:f",
    )
    task = Task("a.pt2", "cpu-baseline", "dynamo", "pkg.mod:f", "pkg.mod")
    compiled = Compiled.of(task, Built(tmp_path / "b.so", "ab" * 32, 7, "AVX2"), "2")
    write_compiled(tmp_path, [compiled])
    (read,) = read_compiled(tmp_path)
    assert read == compiled and (read.backend, read.backend_version) == ("dynamo", "2")


def test_workers_of_a_build_share_one_header_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Each compile worker gets an Inductor cache of its own, but the build's one folder of
    precompiled headers (two workers of a cold build made every header twice)."""
    from torch._inductor import codecache

    from aot_build.compile.pool import _init_worker
    from aot_build.constants import ENV_HEADERS_DIR

    monkeypatch.delenv(ENV_HEADERS_DIR, raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "unused"))
    monkeypatch.setattr(codecache, "_HEADER_DIR", codecache._HEADER_DIR)
    monkeypatch.setattr(codecache, "_HEADER_LOCK_DIR", codecache._HEADER_LOCK_DIR)
    monkeypatch.setattr(sys, "path", list(sys.path))
    root = tmp_path / "inductor"
    root.mkdir()
    caches, headers = set(), set()
    for _ in range(2):
        _init_worker({}, "", str(root))
        caches.add(os.environ["TORCHINDUCTOR_CACHE_DIR"])
        headers.add(codecache._HEADER_DIR)
    assert len(caches) == 2 and all(Path(c).parent == root for c in caches)
    assert headers == {str(root / "precompiled_headers")}


def test_precompiled_headers_only_where_they_pay_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A build compiling three or more programs for a target precompiles Inductor's headers,
    once for all its workers (they cost more than they save for one or two: a Bazel action
    compiles one), or any number when AOT_BUILD_HEADERS_DIR keeps them for later builds; the
    project's own inductor-options win; the target's pins stay."""
    from aot_build.backends.aoti import HEADERS_FROM, PRECOMPILE_HEADERS, inductor_config
    from aot_build.compile.pool import batches
    from aot_build.compile.units import Task
    from aot_build.constants import ENV_HEADERS_DIR
    from aot_build.toolchain import header_folder

    monkeypatch.delenv(ENV_HEADERS_DIR, raising=False)
    assert header_folder("/work/build") == "/work/build"

    tasks = [Task(f"p{i}", t, "aoti", "m:f", "m") for i in range(5) for t in ("cpu-avx2", "cpu-baseline")]
    tasks.append(Task("q", "cpu-avx512", "aoti", "m:g", "m"))
    assert batches(tasks) == {"cpu-avx2": 5, "cpu-baseline": 5, "cpu-avx512": 1}
    avx2 = parse_target("cpu-avx2")
    assert inductor_config(avx2, {}, HEADERS_FROM)[PRECOMPILE_HEADERS] is True
    assert inductor_config(avx2, {}, HEADERS_FROM - 1)[PRECOMPILE_HEADERS] is False
    assert inductor_config(avx2, {PRECOMPILE_HEADERS: True}, 1)[PRECOMPILE_HEADERS] is True
    monkeypatch.setenv(ENV_HEADERS_DIR, str(tmp_path / "headers"))
    assert header_folder("/work/build") == str(tmp_path / "headers")
    assert inductor_config(avx2, {}, 1)[PRECOMPILE_HEADERS] is True
    assert inductor_config(avx2, {PRECOMPILE_HEADERS: False}, 5)[PRECOMPILE_HEADERS] is False
    from aot_build.targets import compile_options

    pins = compile_options(avx2)
    assert pins and all(inductor_config(avx2, {k: "other" for k in pins}, 1)[k] == v for k, v in pins.items())


def test_a_note_is_printed_once_per_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An entry's variants (a dynamic entry's size-one ones, its input sets) often earn the same
    note (updates in place, random numbers, embedded constants): it is printed once."""
    exporter = Exporter(tmp_path, "aoti", tmp_path)
    for msg in ("pkg:f draws random numbers (aten.rand)", "pkg:f draws random numbers (aten.rand)", "other"):
        exporter.note(msg)
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["aot-build: note: pkg:f draws random numbers (aten.rand)", "aot-build: note: other"]
