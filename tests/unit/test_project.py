"""aot-build's own packaging metadata: what pyproject.toml promises must exist."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from aot_build import constants
from aot_build.__main__ import main as cli_main
from aot_build.settings import json_schema

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PYPROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _resolve(target: str) -> object:
    module, _, attr = target.partition(":")
    obj: object = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def test_plugin_entry_point_resolves() -> None:
    eps = PYPROJECT["project"]["entry-points"]["setuptools.finalize_distribution_options"]
    assert eps == {"aot_build": "aot_build.package.hook:finalize"}
    assert callable(_resolve(eps["aot_build"]))


@pytest.mark.parametrize("name", sorted(PYPROJECT["project"].get("scripts", {})))
def test_console_scripts_resolve(name: str) -> None:
    assert callable(_resolve(PYPROJECT["project"]["scripts"][name]))


def test_cli_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == json_schema()


def test_cli_inspect_unknown_package(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["inspect", "no_such_package_xyz"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("aot-build: error: 'no_such_package_xyz' is neither a .whl file")


@pytest.mark.parametrize("target", ["dist/missing-0.1-py3-none-any.whl", "no_such_package_xyz.sub"])
def test_cli_inspect_missing_path_is_a_clean_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli_main(["inspect", target]) == 1
    assert "aot-build: error:" in capsys.readouterr().err


def test_cli_usage_errors() -> None:
    with pytest.raises(SystemExit) as info:
        cli_main([])
    assert info.value.code == 2


def test_no_torch_dependency() -> None:
    """aot-build itself must not pull in torch; packages using it pin their own."""
    assert not [d for d in PYPROJECT["project"]["dependencies"] if d.lower().startswith("torch")]


def test_constants_agree_with_the_plugin() -> None:
    assert constants.TOOL_TABLE == "aot-build"
    assert constants.ENV_STRICT == "AOT_BUILD_STRICT"
    assert constants.ENV_DISABLE == "AOT_BUILD_DISABLE"
    assert constants.ENV_TARGETS == "AOT_BUILD_TARGETS"
    assert (constants.ARTIFACT_DIR, constants.MANIFEST_NAME) == ("_aot_build", "manifest.json")
