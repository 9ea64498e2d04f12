"""Device targets end to end: one wheel with cpu-avx512, cpu-avx2 and cpu-baseline
artifacts; each holds no instruction beyond its target, and the installed package loads the
artifact that torch's view of the CPU (ATEN_CPU_CAPABILITY) allows, with eager's results."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import CommandFailed, Venv, build_sample, describe, isolated_env, run, wheel_manifest

from aot_build.constants import ENV_HEADERS_DIR

TARGETS = ("cpu-avx512", "cpu-avx2", "cpu-baseline")
CAPABILITY_TARGET = {"AVX512": "cpu-avx512", "AVX2": "cpu-avx2", "DEFAULT": "cpu-baseline"}

#: Mnemonics an artifact of the target must not contain (beyond the register checks).
AVX512_EXTENSIONS = re.compile(r"\s(vpdpbusds?|vpdpwssds?|vcvtne2?ps2bf16|vdpbf16ps|tileloadd\w*|tdp\w+)\s")
VEX_OR_EVEX = re.compile(r"^\s*[0-9a-f]+:\s+v[a-z0-9]+\s", re.MULTILINE)
MASK_REGISTER = re.compile(r"%k[0-7]\b")

CALL = r"""
import json, sys, warnings, torch
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import multi_target
    x = torch.randn(16, 64)
    with torch.no_grad():
        got = multi_target.score(x)
        want = multi_target.score.__wrapped__(x)
print("RESULT: " + json.dumps({
    "capability": torch.backends.cpu.get_cpu_capability(),
    "loaded": multi_target.score.loaded_target(),
    "close": bool(torch.allclose(got, want, atol=1e-2, rtol=1e-2)),
    "warnings": [str(w.message) for w in caught if "aot_build" in str(w.message)],
}))
"""


@pytest.fixture(scope="module")
def multi_target_wheel(e2e_dir: Path, inductor_cache: Path) -> Path:
    proc, _, out = build_sample("multi_target", e2e_dir, inductor_cache)
    if proc.returncode != 0:
        raise CommandFailed(describe(proc))
    (wheel,) = out.glob("multi_target-*.whl")
    return wheel


def test_headers_kept_where_the_build_is_told(multi_target_wheel: Path) -> None:
    """The build ran with AOT_BUILD_HEADERS_DIR (conftest ``inductor_headers``): although it
    compiled one program per target, each target's headers were precompiled there, to be
    reused by the suite's later builds."""
    folder = Path(os.environ[ENV_HEADERS_DIR]) / "precompiled_headers"
    assert len(list(folder.glob("*.gch"))) >= len(TARGETS), sorted(folder.iterdir())


@pytest.fixture(scope="module")
def artifacts(multi_target_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """target name → the library the wheel ships for it, extracted."""
    dest = tmp_path_factory.mktemp("multi-target-wheel")
    manifest = wheel_manifest(multi_target_wheel, "multi_target", dest)
    (entry,) = manifest.entries.values()
    (variant,) = entry.variants
    return {a.target: dest / "multi_target/_aot_build" / a.file for a in variant.artifacts}


@pytest.fixture(scope="module")
def installed(venv_factory: Callable[..., Venv], multi_target_wheel: Path) -> Venv:
    return venv_factory("targets-venv", multi_target_wheel)


def disassemble(path: Path) -> str:
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("needs binutils' objdump")
    return run([objdump, "-d", "--no-show-raw-insn", path], cwd=path.parent).stdout


def test_wheel_ships_one_artifact_per_target(artifacts: dict[str, Path]) -> None:
    assert set(artifacts) == set(TARGETS)
    assert len({p.name for p in artifacts.values()}) == 3, "targets compiled to identical files"
    assert all(p.stat().st_size > 0 for p in artifacts.values())


def test_avx2_artifact_has_no_avx512(artifacts: dict[str, Path]) -> None:
    code = disassemble(artifacts["cpu-avx2"])
    assert "%ymm" in code, "the AVX2 artifact is not vectorised at all"
    assert "%zmm" not in code
    assert not MASK_REGISTER.search(code), "AVX-512 mask registers in the AVX2 artifact"


def test_baseline_artifact_has_no_avx(artifacts: dict[str, Path]) -> None:
    code = disassemble(artifacts["cpu-baseline"])
    assert "%ymm" not in code and "%zmm" not in code
    found = VEX_OR_EVEX.findall(code)
    assert found == [], f"VEX/EVEX instructions in the baseline artifact: {found[:5]}"


def test_avx512_artifact_uses_only_the_common_avx512_subset(artifacts: dict[str, Path]) -> None:
    code = disassemble(artifacts["cpu-avx512"])
    assert "%zmm" in code, "the AVX-512 artifact holds no AVX-512 code"
    found = AVX512_EXTENSIONS.findall(code)
    assert found == [], f"VNNI/BF16/AMX instructions (the build host's, not the target's): {found[:5]}"


@pytest.mark.parametrize("capability", [None, "avx2", "default"])
def test_installed_wheel_loads_the_artifact_the_cpu_allows(
    installed: Venv, tmp_path: Path, capability: str | None
) -> None:
    extra = {"ATEN_CPU_CAPABILITY": capability} if capability else {}
    env = isolated_env(installed, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "cache"), **extra)
    proc = run([installed.python, "-c", CALL], cwd=tmp_path, env=env)
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT: ")]
    facts: dict[str, Any] = json.loads(line.removeprefix("RESULT: "))
    expected = CAPABILITY_TARGET[facts["capability"]]
    if capability == "default":
        assert expected == "cpu-baseline"
    assert facts["loaded"] == expected
    assert facts["close"], "compiled result differs from eager"
    assert facts["warnings"] == []
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())

    inspected = run(
        [installed.python, "-m", "aot_build", "inspect", "multi_target", "--json"], cwd=tmp_path, env=env
    )
    info = json.loads(inspected.stdout)
    (package,) = info["packages"]
    (entry,) = package["entries"]
    assert entry["this_host_loads"] == expected
    assert {a["target"] for a in entry["artifacts"]} == set(TARGETS)
