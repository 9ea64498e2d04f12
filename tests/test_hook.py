"""The setuptools plugin: the torch pin and how it configures a distribution."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.requirements import Requirement
from setuptools.dist import Distribution

from aot_build import __version__
from aot_build.errors import ConfigError
from aot_build.package import hook
from aot_build.package.command import build_aot
from aot_build.package.hook import pin_torch

SHIM = f"aot-build>={__version__}"


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


@pytest.mark.parametrize("listed", ["aot-build", "aot_build>=0.1", "AOT-Build==0.1.0"])
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
    monkeypatch.setattr(hook.metadata, "version", lambda name: "2.13.0+cpu")
    assert hook.torch_release() == "2.13.0"


def test_torch_release_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise hook.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(hook.metadata, "version", missing)
    with pytest.raises(ConfigError, match=r'torch is not installed.*"torch==X.Y.Z"'):
        hook.torch_release()


def _dist(tmp_path: Path, pyproject: str, monkeypatch: pytest.MonkeyPatch) -> Distribution:
    """A Distribution made where there is no pyproject.toml (its constructor already runs
    every finalize hook, ours included), then a project directory to finalize it in."""
    neutral = tmp_path / "neutral"
    neutral.mkdir()
    monkeypatch.chdir(neutral)
    dist = Distribution({"name": "demo", "version": "1.0", "install_requires": ["torch>=2"]})
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    monkeypatch.chdir(project)
    return dist


def test_finalize_leaves_other_projects_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = _dist(tmp_path, '[project]\nname = "demo"\n', monkeypatch)
    before = dict(dist.cmdclass)
    hook.finalize(dist)
    assert dist.cmdclass == before
    assert "build_aot" not in dist.cmdclass
    assert not dist.has_ext_modules()


def test_finalize_configures_opted_in_projects(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_aot, "settings", build_aot.settings)  # restored afterwards
    dist = _dist(tmp_path, '[tool.aot-build]\ntargets = ["cpu-baseline"]\n', monkeypatch)
    hook.finalize(dist)
    assert dist.cmdclass["build_aot"] is build_aot
    assert build_aot.settings.targets == ["cpu-baseline"]
    build_cls = dist.cmdclass["build"]
    assert ("build_aot", None) in build_cls.sub_commands
    names = [name for name, _ in build_cls.sub_commands]
    assert names.index("build_aot") > names.index("build_py")
    assert dist.has_ext_modules()  # platform-tagged wheel


def test_finalize_refuses_bad_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = _dist(tmp_path, '[tool.aot-build]\ntarget = ["cpu"]\n', monkeypatch)
    with pytest.raises(ConfigError, match="Did you mean 'targets'"):
        hook.finalize(dist)


def test_plugin_is_registered_for_setuptools() -> None:
    from importlib.metadata import entry_points

    eps = [
        ep for ep in entry_points(group="setuptools.finalize_distribution_options") if ep.name == "aot_build"
    ]
    assert len(eps) == 1
    assert eps[0].value == "aot_build.package.hook:finalize"
    assert eps[0].load() is hook.finalize
