"""aarch64, end to end, on this x86-64 host: example_pkg cross-built (Debian's
``g++-aarch64-linux-gnu`` against torch's aarch64 wheel) into a ``manylinux_2_28_aarch64``
wheel, installed, and run under qemu-user by Debian's arm64 Python with torch's aarch64 wheel:
every entry compiled (the ``cpu-neon`` artifact), equal to eager, no compiler on PATH.

Opt-in: the cross build takes ~6 min on 2 cores and the emulated run ~1 min, too long for every
CI run. Set AOT_BUILD_AARCH64_ROOT to a folder made by scripts/aarch64-qemu-root.sh."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import zipfile
from pathlib import Path

import pytest
from helpers import EXAMPLE_PROJECT, TESTS_DIR, build_env, copy_project, run, wheel_names, wheel_tags
from test_e2e import EXAMPLE_ENTRIES, assert_compiled_call

from aot_build.native.elf import read_dynamic
from aot_build.native.platform_tag import check_floor

ENV_ROOT = "AOT_BUILD_AARCH64_ROOT"
ROOT = Path(os.environ.get(ENV_ROOT, "/nonexistent"))
CROSS_CXX = "aarch64-linux-gnu-g++"
TORCH_LIBS = ("libtorch_cpu.so", "libc10.so", "libgomp.so.1", "libtorch.so")

_READY = (ROOT / "opt/site/torch").is_dir() and shutil.which("qemu-aarch64") and shutil.which(CROSS_CXX)
needs_root = pytest.mark.skipif(
    not _READY,
    reason=f"opt-in (a ~6 min cross build and a ~1 min emulated run): set {ENV_ROOT} to a folder made by "
    "scripts/aarch64-qemu-root.sh (installs qemu-user and g++-aarch64-linux-gnu)",
)

#: Which target's artifact each entry loads, and where it runs.
LOADED = """
import json, platform
import example_pkg
loaded = {{n: getattr(example_pkg, n).loaded_target() for n in {entries!r}}}
print("LOADED: " + json.dumps({{"loaded": loaded, "machine": platform.machine()}}))
"""


@needs_root
def test_cross_built_aarch64_wheel_runs_compiled_under_qemu(
    aot_build_wheel: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("aarch64")
    cross_torch = ROOT / "opt" / "site" / "torch"
    src = copy_project(EXAMPLE_PROJECT, tmp / "example_pkg")
    env = build_env(
        aot_build_wheel.parent,
        CXX=CROSS_CXX,
        AOT_BUILD_CROSS_TORCH=str(cross_torch),
        AOT_BUILD_CACHE_DIR=str(tmp / "aot-build-cache"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp / "inductor-cache"),
    )
    t0 = time.perf_counter()
    build: list[str | Path] = [sys.executable, "-m", "build", "--wheel", "--outdir", tmp / "dist", "."]
    proc = run(build, cwd=src, env=env, timeout=2400)
    build_s = time.perf_counter() - t0
    (wheel,) = (tmp / "dist").glob("*.whl")
    py = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert wheel_tags(wheel) == [f"{py}-{py}-manylinux_2_28_aarch64"], wheel.name
    assert "exporting 4 entries for cpu-neon, cpu-baseline" in proc.stdout, proc.stdout
    with zipfile.ZipFile(wheel) as zf:
        manifest = json.loads(zf.read("example_pkg/_aot_build/manifest.json"))
        for name in (n for n in wheel_names(wheel) if n.endswith(".so")):
            path = tmp / Path(name).name
            path.write_bytes(zf.read(name))
            lib = read_dynamic(path)
            assert lib.machine == "aarch64", name
            check_floor([lib], 28)
    assert manifest["machine"] == "aarch64"
    from auditwheel.architecture import Architecture
    from auditwheel.wheel_abi import analyze_wheel_abi

    exclude = frozenset(TORCH_LIBS)
    info = analyze_wheel_abi(
        None, Architecture.aarch64, wheel, exclude, disable_isa_ext_check=False, allow_graft=False
    )
    assert int(info.overall_policy.name.split("_")[2]) <= 28, info.overall_policy.name

    # installed for the aarch64 Python, run by qemu-user: no compiler anywhere on PATH
    target = tmp / "site"
    pip: list[str | Path] = [sys.executable, "-m", "pip", "install", "--no-deps", "--target", target]
    pip += ["--platform", "manylinux_2_28_aarch64", "--python-version", "3.11", "--only-binary=:all:"]
    run([*pip, aot_build_wheel, wheel], cwd=tmp)
    script = shutil.copy2(TESTS_DIR / "installed_check.py", tmp / "installed_check.py")
    (tmp / "loaded.py").write_text(LOADED.format(entries=list(EXAMPLE_ENTRIES)), encoding="utf-8")
    (tmp / "cwd").mkdir()
    (tmp / "ic").mkdir()
    qemu = [
        shutil.which("qemu-aarch64") or "qemu-aarch64", "-L", str(ROOT),
        "-E", f"PATH={tmp / 'no-compiler'}",
        "-E", f"LD_LIBRARY_PATH={ROOT / 'opt' / 'cuda-stubs'}",
        "-E", f"PYTHONPATH={target}:{ROOT / 'opt' / 'site'}",
        "-E", f"TORCHINDUCTOR_CACHE_DIR={tmp / 'ic'}",
        "-E", "HOME=/tmp",
        str(ROOT / "usr" / "bin" / "python3.11"),
    ]  # fmt: skip
    t0 = time.perf_counter()
    out = run([*qemu, script, "covered"], cwd=tmp / "cwd", env={}, timeout=1800).stdout
    run_s = time.perf_counter() - t0
    (line,) = [ln for ln in out.splitlines() if ln.startswith("RESULT: ")]
    facts = json.loads(line.removeprefix("RESULT: "))
    assert facts["compilers"] == {c: None for c in ("g++", "gcc", "cc", "c++", "clang")}
    for name in EXAMPLE_ENTRIES:
        assert_compiled_call(facts["calls"][name], name)
        assert_compiled_call(facts["second"][name], f"{name} (second call)")
    assert facts["changed_files"] == {"example_pkg": [], "aot_build": []}
    loaded_out = run([*qemu, tmp / "loaded.py"], cwd=tmp / "cwd", env={}, timeout=1800).stdout
    (line,) = [ln for ln in loaded_out.splitlines() if ln.startswith("LOADED: ")]
    loaded = json.loads(line.removeprefix("LOADED: "))
    assert loaded["machine"] == "aarch64"
    assert set(loaded["loaded"].values()) == {"cpu-neon"}, loaded
    print(f"aarch64: cross build {build_s:.0f} s, emulated run {run_s:.0f} s")
