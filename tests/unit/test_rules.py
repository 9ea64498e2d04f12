"""The compile backend registry (aot_build.rules): built-in backends, backends other
distributions register as entry points (in the group's old name too, deprecated), the errors
for names and objects that are not backends, and the deprecated ``rule`` spellings."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any, ClassVar

import pytest

from aot_build import aot_entry, backends
from aot_build.compile.export import Exporter
from aot_build.errors import CompileError, ConfigError, EntryError
from aot_build.settings import settings_from_table


class _EntryPoint:
    def __init__(self, name: str, obj: Any) -> None:
        self.name, self.value, self._obj = name, f"plugin:{name}", obj
        self.group = backends.ENTRY_POINT_GROUP

    def load(self) -> Any:
        return self._obj


class GoodRule:
    name = "good"
    version = "3"
    convention = backends.FLAT

    def compile(self, request: backends.ProgramRequest) -> backends.Built:
        raise NotImplementedError

    def load(self, path: Path, device: str, function: Any) -> Any:
        raise NotImplementedError


class Unnamed(GoodRule):
    name = "something-else"


class OtherConvention(GoodRule):
    name = "odd"
    convention = "keyword"


class NoCompiler(GoodRule):
    """Ships what it was given: no compiler, no native code, CPU only, no training."""

    name = "plain"
    capabilities = backends.Capabilities(
        devices=frozenset({"cpu"}), needs_compiler=False, native=False, training=backends.TRAINING_NONE
    )


class InProcess(GoodRule):
    name = "here"
    capabilities = backends.Capabilities(in_process=True, native=True)


class CallInWorker(GoodRule):
    name = "callworker"
    convention = backends.CALL
    capabilities = backends.Capabilities(training=backends.TRAINING_GRAD)


class CallTrainsJoint(GoodRule):
    name = "calljoint"
    convention = backends.CALL
    capabilities = backends.Capabilities(in_process=True)


class LooseCapabilities(GoodRule):
    name = "loose"
    capabilities: ClassVar[Any] = {"native": True}


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    table = {
        "good": _EntryPoint("good", GoodRule),
        "unnamed": _EntryPoint("unnamed", Unnamed),
        "odd": _EntryPoint("odd", OtherConvention),
        "notarule": _EntryPoint("notarule", object()),
        **{
            c.name: _EntryPoint(c.name, c)
            for c in (NoCompiler, InProcess, CallInWorker, CallTrainsJoint, LooseCapabilities)
        },
    }
    monkeypatch.setattr(backends, "_installed", lambda: table)
    monkeypatch.setattr(backends, "_FOUND", {})
    return table


def test_builtin_backends_are_backends() -> None:
    for name in ("aoti", "dynamo"):
        backend = backends.find(name)
        assert isinstance(backend, backends.Backend) and backend.name == name and backend.version
    assert (
        backends.find("aoti").convention == backends.FLAT
        and backends.find("dynamo").convention == backends.CALL
    )


def test_installed_backend_is_found_once(installed: dict[str, Any]) -> None:
    backend = backends.find("good")
    assert isinstance(backend, GoodRule) and backends.find("good") is backend
    assert "good" in backends.available() and "aoti" in backends.available()


def test_unknown_backend_names_what_is_available(installed: dict[str, Any]) -> None:
    with pytest.raises(backends.UnknownBackend) as info:
        backends.find("aot")
    msg = str(info.value)
    assert "no compile backend 'aot' is installed" in msg and "Did you mean 'aoti'?" in msg
    assert "'aot_build.backends'" in msg and "good" in msg


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("unnamed", "calls itself 'something-else'"),
        ("odd", "declares calling convention 'keyword'"),
        ("notarule", "is not a compile backend: it lacks name, version, convention, compile, load"),
        ("callworker", "declares in_process=False; a 'call' backend compiles the Python function"),
        ("calljoint", "declares training 'joint'; a 'call' backend trains 'grad' or 'none'"),
        ("loose", "declares capabilities of type dict; declare an aot_build.backends.Capabilities"),
    ],
)
def test_registered_objects_that_are_not_backends(
    installed: dict[str, Any], name: str, fragment: str
) -> None:
    with pytest.raises(TypeError, match=fragment) as info:
        backends.find(name)
    assert f"entry point plugin:{name}" in str(info.value)


def _distribution(site: Path, name: str, groups: dict[str, str]) -> None:
    """An installed distribution ``name`` (metadata only) whose module ``old_backend`` holds
    GoodRule's twin, registering it as ``good`` in each group of ``groups`` (group -> name)."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "".join(f"[{group}]\n{ep} = old_backend:OldBackend\n\n" for group, ep in groups.items())
    )
    (site / "old_backend.py").write_text(
        "class OldBackend:\n    name = 'old'\n    version = '1'\n    convention = 'flat'\n"
        "    def compile(self, request): ...\n    def load(self, path, device, function): ...\n"
    )


def test_old_entry_point_group_is_read_with_a_deprecation_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _distribution(tmp_path, "old-plugin", {backends.OLD_ENTRY_POINT_GROUP: "old"})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(backends, "_FOUND", {})
    monkeypatch.delitem(sys.modules, "old_backend", raising=False)
    assert "old" in backends.available()
    with pytest.warns(DeprecationWarning) as caught:
        backend = backends.find("old")
    assert backend.name == "old" and type(backend).__module__ == "old_backend"
    (msg,) = [str(w.message) for w in caught]
    assert msg.startswith(
        "old-plugin registers the compile backend 'old' in the entry point group 'aot_build.rules'"
    )
    assert "register it in 'aot_build.backends'" in msg


def test_new_entry_point_group_wins_without_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _distribution(
        tmp_path, "both-plugin", {backends.OLD_ENTRY_POINT_GROUP: "old", backends.ENTRY_POINT_GROUP: "old"}
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(backends, "_FOUND", {})
    monkeypatch.delitem(sys.modules, "old_backend", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert backends.find("old").name == "old"


def missing_rule(x: Any) -> Any:
    return x


def project_rule(x: Any) -> Any:
    return x


def other(x: Any) -> Any:
    return x


def test_unknown_backend_fails_the_build_naming_entry_and_setting(installed: dict[str, Any]) -> None:
    entry = aot_entry(missing_rule, example_inputs=(1,), backend="aotii")
    compiler = Exporter(Path(), "aoti", Path())
    with pytest.raises(CompileError) as info:
        compiler.backend_of(entry, "pkg.mod:f (pkg/mod.py:3)")
    msg = str(info.value)
    assert msg.startswith('pkg.mod:f (pkg/mod.py:3): @aot_entry(backend="aotii"): no compile backend')
    assert "Did you mean 'aoti'?" in msg
    plain = aot_entry(project_rule, example_inputs=(1,))
    project = Exporter(Path(), "dynamoo", Path())
    with pytest.raises(
        CompileError, match=r'\[tool.aot-build\] backend = "dynamoo": .*Did you mean \'dynamo\''
    ):
        project.backend_of(plain, "pkg.mod:g")
    assert project.backend_of(aot_entry(other, example_inputs=(1,), backend="good"), "w") == "good"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"backend": 3}, "backend must be a compile backend's name"),
        ({"backend": ""}, "backend must be"),
        ({"backward": 1}, "backward must be"),
    ],
)
def test_decorator_checks_backend_and_backward(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(EntryError, match=fragment):
        aot_entry(other, example_inputs=(1,), **kwargs)


def deprecated(x: Any) -> Any:
    return x


def test_decorator_rule_is_a_deprecated_spelling_of_backend() -> None:
    with pytest.warns(
        DeprecationWarning, match=r"@aot_entry\(rule=\.\.\.\) is deprecated: write backend='dynamo'"
    ):
        entry = aot_entry(deprecated, example_inputs=(1,), rule="dynamo")
    assert entry.backend == "dynamo" and entry.rule == "dynamo"
    with pytest.raises(
        EntryError, match=r"both backend='aoti' and rule='dynamo' are given.*keep only backend"
    ):
        aot_entry(deprecated, example_inputs=(1,), backend="aoti", rule="dynamo")


def test_settings_backend() -> None:
    assert settings_from_table({"backend": "dynamo"}).backend == "dynamo"
    with pytest.raises(ConfigError, match="backend is empty"):
        settings_from_table({"backend": ""})
    with pytest.raises(ConfigError, match="backend must be string"):
        settings_from_table({"backend": ["aoti"]})


def test_settings_rule_is_a_deprecated_spelling_of_backend() -> None:
    with pytest.warns(FutureWarning) as caught:
        settings = settings_from_table({"rule": "dynamo"}, "p/pyproject.toml")
    assert settings.backend == "dynamo" and settings.rule == "dynamo"
    (msg,) = [str(w.message) for w in caught]
    assert msg == (
        "aot-build: p/pyproject.toml: [tool.aot-build] rule is deprecated; it is now called backend: "
        'write backend = "dynamo"'
    )
    with pytest.raises(ConfigError) as info:
        settings_from_table({"rule": "dynamo", "backend": "aoti"}, "p/pyproject.toml")
    assert str(info.value) == (
        "p/pyproject.toml: [tool.aot-build] sets both backend and rule, the old name of backend; remove rule"
    )


def test_capabilities_are_declared_or_the_conventions_defaults(installed: dict[str, Any]) -> None:
    aoti, dynamo = (
        backends.capabilities(backends.find("aoti")),
        backends.capabilities(backends.find("dynamo")),
    )
    assert aoti.native and aoti.cacheable and not aoti.in_process and aoti.training == backends.TRAINING_JOINT
    assert not dynamo.native and dynamo.in_process and not dynamo.cacheable and dynamo.devices == {"cpu"}
    # GoodRule declares none: a FLAT backend's defaults (compiler, worker, cached, not native)
    assert backends.capabilities(backends.find("good")) == backends.default_capabilities(backends.FLAT)
    assert backends.capabilities(backends.find("plain")).needs_compiler is False


def test_the_build_checks_for_a_compiler_only_when_a_backend_needs_one(
    installed: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch._inductor import cpp_builder

    from aot_build.compile.build import check_toolchain

    def missing() -> str:
        raise RuntimeError("no g++")

    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", missing)
    check_toolchain(False, ["plain", "not-installed"])  # neither needs one: nothing checked
    with pytest.raises(
        CompileError, match=r"no working C\+\+ compiler .* The aoti backend compiles with one"
    ):
        check_toolchain(False, ["plain", "aoti"])


def test_export_refuses_what_the_backend_does_not_build(installed: dict[str, Any]) -> None:
    entry = aot_entry(other, example_inputs=(1,), backend="plain")
    Exporter.check_capabilities(entry, "plain", ["cpu"], "pkg.mod:f")
    with pytest.raises(
        CompileError, match=r"pkg\.mod:f: the plain backend builds cpu targets only, not cuda ones"
    ):
        Exporter.check_capabilities(entry, "plain", ["cpu", "cuda"], "pkg.mod:f")
    trains = aot_entry(project_rule, example_inputs=(1,), backend="plain", backward=True)
    with pytest.raises(CompileError, match="backward=True: the plain backend builds no training entries"):
        Exporter.check_capabilities(trains, "plain", ["cpu"], "pkg.mod:g")


def test_the_bazel_split_and_the_cache_name_what_they_leave_out(
    installed: dict[str, Any], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from aot_build.build_config import BuildConfig
    from aot_build.compile.build import Builder
    from aot_build.compile.steps import unsplittable
    from aot_build.compile.units import Task

    assert unsplittable("aoti") is None and unsplittable("good") is None
    assert "compiles in the build process" in str(unsplittable("dynamo"))
    assert "compiles in the build process" in str(unsplittable("here"))
    builder = Builder(BuildConfig(build_lib="", cache_dir=str(tmp_path)), tmp_path, {})
    tasks = [Task("p.pt2", "cpu-baseline", name, "w", "m") for name in ("aoti", "here", "dynamo")]
    assert builder.uncached(tasks) == {"here", "dynamo"}
    out = capsys.readouterr().out
    assert "note: the build cache does not keep the here backend's outputs: it compiles in the build" in out
    assert "the dynamo backend's outputs" in out and "aoti backend" not in out
    assert builder.in_process(tasks[1]) and not builder.in_process(tasks[0])


def test_the_wheel_is_native_as_the_backends_declare(installed: dict[str, Any]) -> None:
    from aot_build.manifest import Artifact, Entry, Manifest, Variant
    from aot_build.package.command import native_files

    manifest = Manifest("pkg", "0.4.0", "2.13.0", "3.11", "x86_64", evaluator="ev.so")
    variant = Variant(inputs=None, leaves=(), outputs=None, out_leaves=())
    variant.artifacts = (
        Artifact("cpu-baseline", "cpu", "aoti", "a.so"),
        Artifact("cpu-baseline", "cpu", "plain", "b.so"),  # a .so, but its backend ships no native code
        Artifact("cpu-baseline", "cpu", "here", "c.bin"),
    )
    manifest.entries["pkg:f"] = Entry("pkg", "f", "pkg/__init__.py:1", (variant,))
    assert native_files(manifest) == {"ev.so", "a.so", "c.bin"}
