"""The wheel's requirements: static dependencies checked, dynamic ones supplied."""

from __future__ import annotations

import pytest
from packaging.requirements import Requirement

from aot_build.errors import ConfigError
from aot_build.package import requirements
from aot_build.package.requirements import SHIM_REQUIREMENT, check_static, supply

SHIM = SHIM_REQUIREMENT


def pin_torch(requires: list[str], release: str, where: str) -> list[str]:
    return supply(requires, release, where)


def _names(reqs: list[str]) -> list[str]:
    return [Requirement(r).name for r in reqs]


@pytest.mark.parametrize(
    "torch_req",
    ["torch", "torch>=2.0", "torch>=2.0,<3", "torch==2.13.0", "torch~=2.13.0", "Torch>=2", "torch==2.13.*"],
)
def test_replaces_torch_ranges(torch_req: str) -> None:
    out = pin_torch(["numpy>=1", torch_req], "2.13.0", "pyproject.toml")
    assert out == ["numpy>=1", SHIM, "torch==2.13.0"]


def test_adds_torch_when_absent() -> None:
    assert pin_torch([], "2.13.0", "x") == [SHIM, "torch==2.13.0"]


@pytest.mark.parametrize("torch_req", ["torch<2.13", "torch>=2.14", "torch==2.12.1", "torch!=2.13.0"])
def test_range_excluding_release_is_an_error(torch_req: str) -> None:
    with pytest.raises(ConfigError) as info:
        pin_torch([torch_req], "2.13.0", "proj/pyproject.toml")
    msg = str(info.value)
    assert msg.startswith("proj/pyproject.toml: ")
    assert repr(torch_req) in msg
    assert "excludes torch 2.13.0" in msg


def test_prerelease_release_is_accepted_by_a_range() -> None:
    out = pin_torch(["torch>=2.13.0.dev0"], "2.14.0.dev20260101", "x")
    assert out[-1] == "torch==2.14.0.dev20260101"


@pytest.mark.parametrize("listed", ["aot-build>=0.4", "aot_build>=0.4.0", "AOT-Build==0.4.0"])
def test_shim_not_added_when_listed(listed: str) -> None:
    out = pin_torch([listed, "torch"], "2.13.0", "x")
    assert out == [listed, "torch==2.13.0"]
    assert _names(out).count("torch") == 1


def test_conditional_torch_requirement_is_kept() -> None:
    conditional = "torch>=2; sys_platform == 'linux'"
    out = pin_torch([conditional], "2.13.0", "x")
    assert out[0] == conditional
    assert out[-1] == "torch==2.13.0"


def test_other_requirements_untouched_and_in_order() -> None:
    reqs = ["b>=1", "a[extra]==2; python_version>='3.10'", "torchvision==0.29.0"]
    out = pin_torch(reqs, "2.13.0", "x")
    assert out[:3] == reqs
    assert out[3:] == [SHIM, "torch==2.13.0"]


def test_torch_release_strips_local_label(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requirements.metadata, "version", lambda name: "2.13.0+cpu")
    assert requirements.torch_release() == "2.13.0"


def test_torch_release_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise requirements.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(requirements.metadata, "version", missing)
    with pytest.raises(ConfigError, match=r'torch is not installed.*"torch==X.Y.Z"'):
        requirements.torch_release()


def test_supply_refuses_an_aot_build_too_old_to_read_the_manifest() -> None:
    with pytest.raises(ConfigError, match=r"'aot-build>=0.1' allows aot-build 0.1.0, whose reader cannot"):
        supply(["aot-build>=0.1"], "2.13.0", "x")


@pytest.mark.parametrize(
    "deps",
    [
        ["torch==2.13.0", SHIM],
        ["numpy", "torch==2.13.0", "aot-build>=0.4.0,<1", "torch>=2; sys_platform == 'darwin'"],
        ["TORCH==2.13.0", "aot_build==0.4.0"],
    ],
)
def test_static_dependencies_accepted(deps: list[str]) -> None:
    check_static(deps, "2.13.0", "p/pyproject.toml")


@pytest.mark.parametrize(
    ("deps", "why", "line"),
    [
        ([], "", 'dependencies = ["torch==2.13.0", "aot-build>=0.4.0"]'),
        (["numpy>=2"], "", 'dependencies = ["numpy>=2", "torch==2.13.0", "aot-build>=0.4.0"]'),
        (["torch>=2", SHIM], "'torch>=2' is not the exact pin", "must pin torch==2.13.0 ("),
        (["torch==2.13.0", "aot-build"], "'aot-build' allows aot-build 0.1.0", "must pin aot-build>=0.4.0 ("),
        (["torch==2.13.*", SHIM], "not the exact pin", '= ["torch==2.13.0", "aot-build>=0.4.0"]'),
        (["torch; python_version>='3'", SHIM], "", "must pin torch==2.13.0:"),
    ],
)
def test_static_dependencies_refused_with_the_line_to_write(deps: list[str], why: str, line: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_static(deps, "2.13.0", "p/pyproject.toml")
    msg = str(info.value)
    assert msg.startswith("p/pyproject.toml: [project].dependencies must pin ")
    assert why in msg
    assert line in msg
    assert 'dynamic = ["dependencies"]' in msg


def test_static_range_excluding_the_build_torch() -> None:
    with pytest.raises(ConfigError, match=r"excludes torch 2\.13\.0"):
        check_static(["torch<2.13", SHIM], "2.13.0", "x")


def test_invalid_requirement_named() -> None:
    with pytest.raises(ConfigError, match=r"x: dependency 'torch ==' is not a valid requirement"):
        check_static(["torch =="], "2.13.0", "x")
