"""The compile rule registry (aot_build.rules): built-in rules, rules other distributions
register as entry points, and the errors for names and objects that are not rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aot_build import aot_entry, rules
from aot_build.compile.driver import Job, _Compiler
from aot_build.errors import CompileError, ConfigError, EntryError
from aot_build.settings import settings_from_table


class _EntryPoint:
    def __init__(self, name: str, obj: Any) -> None:
        self.name, self.value, self._obj = name, f"plugin:{name}", obj

    def load(self) -> Any:
        return self._obj


class GoodRule:
    name = "good"
    version = "3"
    convention = rules.FLAT

    def compile(self, request: rules.CompileRequest) -> rules.Built:
        raise NotImplementedError

    def load(self, path: Path, device: str, function: Any) -> Any:
        raise NotImplementedError


class Unnamed(GoodRule):
    name = "something-else"


class OtherConvention(GoodRule):
    name = "odd"
    convention = "keyword"


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    table = {
        "good": _EntryPoint("good", GoodRule),
        "unnamed": _EntryPoint("unnamed", Unnamed),
        "odd": _EntryPoint("odd", OtherConvention),
        "notarule": _EntryPoint("notarule", object()),
    }
    monkeypatch.setattr(rules, "_installed", lambda: table)
    monkeypatch.setattr(rules, "_FOUND", {})
    return table


def test_builtin_rules_are_rules() -> None:
    for name in ("aoti", "dynamo"):
        rule = rules.find(name)
        assert isinstance(rule, rules.Rule) and rule.name == name and rule.version
    assert rules.find("aoti").convention == rules.FLAT and rules.find("dynamo").convention == rules.CALL


def test_installed_rule_is_found_once(installed: dict[str, Any]) -> None:
    rule = rules.find("good")
    assert isinstance(rule, GoodRule) and rules.find("good") is rule
    assert "good" in rules.available() and "aoti" in rules.available()


def test_unknown_rule_names_what_is_available(installed: dict[str, Any]) -> None:
    with pytest.raises(rules.UnknownRule) as info:
        rules.find("aot")
    msg = str(info.value)
    assert "no compile rule 'aot' is installed" in msg and "Did you mean 'aoti'?" in msg
    assert "'aot_build.rules'" in msg and "good" in msg


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("unnamed", "calls itself 'something-else'"),
        ("odd", "declares calling convention 'keyword'"),
        ("notarule", "is not a compile rule: it lacks name, version, convention, compile, load"),
    ],
)
def test_registered_objects_that_are_not_rules(installed: dict[str, Any], name: str, fragment: str) -> None:
    with pytest.raises(TypeError, match=fragment) as info:
        rules.find(name)
    assert f"entry point plugin:{name}" in str(info.value)


def missing_rule(x: Any) -> Any:
    return x


def project_rule(x: Any) -> Any:
    return x


def other(x: Any) -> Any:
    return x


def test_unknown_rule_fails_the_build_naming_entry_and_setting(installed: dict[str, Any]) -> None:
    entry = aot_entry(missing_rule, example_inputs=(1,), rule="aotii")
    compiler = _Compiler(Job(build_lib=".", packages=[], modules=[], targets=[]))
    with pytest.raises(CompileError) as info:
        compiler.rule_of(entry, "pkg.mod:f (pkg/mod.py:3)")
    msg = str(info.value)
    assert msg.startswith('pkg.mod:f (pkg/mod.py:3): @aot_entry(rule="aotii"): no compile rule')
    assert "Did you mean 'aoti'?" in msg
    plain = aot_entry(project_rule, example_inputs=(1,))
    project = _Compiler(Job(build_lib=".", packages=[], modules=[], targets=[], rule="dynamoo"))
    with pytest.raises(CompileError, match=r'\[tool.aot-build\] rule = "dynamoo": .*Did you mean \'dynamo\''):
        project.rule_of(plain, "pkg.mod:g")
    assert project.rule_of(aot_entry(other, example_inputs=(1,), rule="good"), "w") == "good"


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({"rule": 3}, "rule must be a rule's name"),
        ({"rule": ""}, "rule must be"),
        ({"backward": 1}, "backward must be"),
    ],
)
def test_decorator_checks_rule_and_backward(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(EntryError, match=fragment):
        aot_entry(other, example_inputs=(1,), **kwargs)


def test_settings_rule() -> None:
    assert settings_from_table({"rule": "dynamo"}).rule == "dynamo"
    with pytest.raises(ConfigError, match="rule is empty"):
        settings_from_table({"rule": ""})
    with pytest.raises(ConfigError, match="rule must be string"):
        settings_from_table({"rule": ["aoti"]})
