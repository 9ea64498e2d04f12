"""The setuptools plugin: how it configures a distribution (requirements, commands, tag)."""

from __future__ import annotations

from pathlib import Path

import pytest
from setuptools.dist import Distribution

from aot_build.errors import ConfigError
from aot_build.package import hook
from aot_build.package.command import artifacts_platform, build_aot
from aot_build.package.requirements import SHIM_REQUIREMENT, torch_release
from aot_build.targets import machine


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
    default = build_aot.settings
    dist = _dist(tmp_path, '[tool.aot-build]\ntargets = ["cpu-baseline"]\n', monkeypatch)
    hook.finalize(dist)
    command = dist.cmdclass["build_aot"]
    assert issubclass(command, build_aot) and command is not build_aot
    assert command.settings.targets == ["cpu-baseline"] and command.project_dir == tmp_path / "project"
    assert build_aot.settings is default  # the shared class keeps no project's settings
    build_cls = dist.cmdclass["build"]
    assert ("build_aot", None) in build_cls.sub_commands
    names = [name for name, _ in build_cls.sub_commands]
    assert names.index("build_aot") > names.index("build_py")
    assert dist.has_ext_modules()  # platform-tagged wheel


def test_static_dependencies_are_checked_not_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pyproject = '[project]\nname = "demo"\ndependencies = ["numpy", "torch>=2"]\n[tool.aot-build]\n'
    dist = _dist(tmp_path, pyproject, monkeypatch)
    with pytest.raises(ConfigError) as info:
        hook.finalize(dist)
    msg = str(info.value)
    assert "pyproject.toml: [project].dependencies must pin torch==" in msg
    assert 'dependencies = ["numpy", "torch==' in msg
    assert dist.install_requires == ["torch>=2"]  # untouched


def test_dynamic_dependencies_get_the_pins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pyproject = '[project]\nname = "demo"\ndynamic = ["dependencies"]\n[tool.aot-build]\n'
    dist = _dist(tmp_path, pyproject, monkeypatch)
    hook.finalize(dist)
    dist._finalize_requires()
    assert dist.install_requires == [SHIM_REQUIREMENT, f"torch=={torch_release()}"]


def test_wheel_tag_comes_from_build_aot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = _dist(tmp_path, "[tool.aot-build]\n", monkeypatch)
    hook.finalize(dist)
    cmd = dist.get_command_obj("bdist_wheel")
    cmd.ensure_finalized()
    assert cmd.get_tag()[2].startswith("linux_")  # build_aot has not run: no library shipped
    built = dist.get_command_obj("build_aot")
    built.platform_tag = "manylinux_2_35_x86_64"  # what its run computed
    assert cmd.get_tag()[2] == "manylinux_2_35_x86_64"
    (tmp_path / "other").mkdir()
    other = _dist(tmp_path / "other", "[tool.aot-build]\n", monkeypatch)
    hook.finalize(other)
    other_cmd = other.get_command_obj("bdist_wheel")
    other_cmd.ensure_finalized()
    assert other_cmd.get_tag()[2].startswith("linux_")  # one project's tag never reaches another


def test_setuptools_still_finalizes_requires_after_the_hooks() -> None:
    """The hook wraps the private ``Distribution._finalize_requires`` (no public hook runs
    between install_requires being filled and the metadata being written): it must exist
    and run after the ``finalize_distribution_options`` hooks, or dynamic pins are lost."""
    import inspect

    assert callable(getattr(Distribution, "_finalize_requires", None))
    source = inspect.getsource(Distribution.parse_config_files)  # pyproject.toml applied, then
    assert source.index("apply_configuration") < source.index("self._finalize_requires()")


def test_artifacts_that_are_no_library_get_the_oldest_manylinux_tag(tmp_path: Path) -> None:
    """A wheel whose artifacts are all of backends that ship no native code (the dynamo
    backend's C++ source) is tied to the architecture, not to a glibc: never ``linux_*``, which
    PyPI refuses. The manifest says which files are native, not their names."""
    from aot_build.manifest import Artifact, Entry, FileRecord, Manifest, Variant

    folder = tmp_path / "pkg" / "_aot_build"
    folder.mkdir(parents=True)
    manifest = Manifest("pkg", "0.4.0", "2.13.0", "3.11", machine())
    manifest.write(folder / "manifest.json")
    assert artifacts_platform(tmp_path) is None  # a manifest alone: no artifact
    name = "ab" * 12 + ".so"  # a dynamo file named like a library: still no library
    (folder / name).write_bytes(b"AOTDYNAMO1\n")
    variant = Variant(inputs=None, leaves=(), outputs=None, out_leaves=())
    variant.artifacts = (Artifact("cpu-baseline", "cpu", "dynamo", name),)
    manifest.entries["pkg:f"] = Entry("pkg", "f", "pkg/__init__.py:1", (variant,))
    manifest.files[name] = FileRecord("ab" * 32, 11)
    manifest.write(folder / "manifest.json")
    assert artifacts_platform(tmp_path) == f"manylinux_2_17_{machine()}"


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


def test_wheel_platform_of_a_library_that_cannot_be_read(tmp_path: Path) -> None:
    from setuptools.errors import SetupError

    from aot_build.package.command import wheel_platform

    bad = tmp_path / "0123.so"
    bad.write_bytes(b"not an ELF file")
    with pytest.raises(SetupError, match=r"cannot tag the wheel: .*0123\.so.*no wheel was written"):
        wheel_platform([bad])


def test_wheel_platform_of_a_compiled_library(tmp_path: Path) -> None:
    """A library needing only glibc and libstdc++ gets a manylinux tag of this architecture."""
    import shutil
    import subprocess

    from aot_build.package.command import wheel_platform
    from aot_build.targets import machine

    if not shutil.which("g++"):
        pytest.skip("no C++ compiler")
    src = tmp_path / "lib.cpp"
    src.write_text('#include <string>\nextern "C" int f(int n) { return (int)std::to_string(n).size(); }\n')
    lib = tmp_path / "lib.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-O1", str(src), "-o", str(lib)], check=True)
    tag = wheel_platform([lib])
    assert tag.startswith("manylinux_2_") and tag.endswith(f"_{machine()}")
