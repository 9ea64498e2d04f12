"""[tool.aot-build]: defaults, validation, the environment override, the JSON schema."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from aot_build.errors import ConfigError
from aot_build.settings import Settings, json_schema, load_settings, markdown_table, settings_from_table


def _project(tmp_path: Path, body: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(body, encoding="utf-8")
    return tmp_path


def test_defaults() -> None:
    s = settings_from_table({})
    assert s == Settings()
    assert s.targets == ["cpu"]
    assert s.optional_targets == []
    assert s.modules == []
    assert s.strip is True
    assert s.inductor_options == {}
    assert "*.tests" in s.exclude and "*.conftest" in s.exclude
    # defaults are fresh lists, not shared between instances
    s.targets.append("cuda-sm90")
    assert Settings().targets == ["cpu"]


def test_every_key_is_read_with_dashes() -> None:
    table = {
        "targets": ["cpu-avx2", "cuda-sm90"],
        "optional-targets": ["cuda-sm90"],
        "modules": ["pkg.a"],
        "exclude": ["pkg.slow"],
        "strip": False,
        "inductor-options": {"max_autotune": True},
    }
    s = settings_from_table(table)
    assert s == Settings(
        targets=["cpu-avx2", "cuda-sm90"],
        optional_targets=["cuda-sm90"],
        modules=["pkg.a"],
        exclude=["pkg.slow"],
        strip=False,
        inductor_options={"max_autotune": True},
    )


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("target", "targets"),
        ("optional_targets", "optional-targets"),
        ("inductor_options", "inductor-options"),
        ("excludes", "exclude"),
        ("module", "modules"),
        ("many-linux", "manylinux"),
    ],
)
def test_unknown_key_did_you_mean(key: str, suggestion: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings_from_table({key: ["cpu"]}, where="proj/pyproject.toml")
    msg = str(info.value)
    assert msg.startswith("proj/pyproject.toml: unknown key")
    assert f"Did you mean {suggestion!r}?" in msg
    keys = "backend, cache, cache-dir, cache-max-size, exclude, inductor-options, jobs, manylinux, "
    keys += "modules, optional-targets, progress, strip, targets"
    assert f"Valid keys: {keys}." in msg


def test_unknown_key_without_close_match_lists_valid_keys() -> None:
    with pytest.raises(ConfigError) as info:
        settings_from_table({"zzzzzz": 1})
    assert "Did you mean" not in str(info.value)
    assert "Valid keys:" in str(info.value)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("targets", "cpu", "targets must be array"),
        ("targets", ["cpu", 3], "targets must be array"),
        ("exclude", [None], "exclude must be array"),
        ("strip", "yes", "strip must be boolean"),
        ("strip", 1, "strip must be boolean"),
        ("inductor-options", ["max_autotune"], "inductor-options must be object"),
    ],
)
def test_type_errors(key: str, value: Any, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as info:
        settings_from_table({key: value})
    assert repr(value) in str(info.value)


def test_load_settings_without_table_or_pyproject(tmp_path: Path) -> None:
    assert load_settings(tmp_path) is None
    _project(tmp_path, '[project]\nname = "x"\n[tool.other]\na = 1\n')
    assert load_settings(tmp_path, environ={"AOT_BUILD_TARGETS": "cpu-avx2"}) is None


def test_load_settings_reads_table(tmp_path: Path) -> None:
    _project(tmp_path, '[tool.aot-build]\ntargets = ["cpu-baseline"]\nstrip = false\n')
    s = load_settings(tmp_path, environ={})
    assert s is not None
    assert s.targets == ["cpu-baseline"]
    assert s.strip is False


def test_load_settings_empty_table_opts_in(tmp_path: Path) -> None:
    _project(tmp_path, "[tool.aot-build]\n")
    assert load_settings(tmp_path, environ={}) == Settings()


def test_env_overrides_targets(tmp_path: Path) -> None:
    _project(tmp_path, '[tool.aot-build]\ntargets = ["cpu-baseline"]\n')
    s = load_settings(tmp_path, environ={"AOT_BUILD_TARGETS": " cpu-avx2 , cuda-sm90,, "})
    assert s is not None
    assert s.targets == ["cpu-avx2", "cuda-sm90"]
    blank = load_settings(tmp_path, environ={"AOT_BUILD_TARGETS": "   "})
    assert blank is not None and blank.targets == ["cpu-baseline"]


def test_env_override_from_process_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _project(tmp_path, "[tool.aot-build]\n")
    monkeypatch.setenv("AOT_BUILD_TARGETS", "cpu-baseline")
    s = load_settings(tmp_path)
    assert s is not None and s.targets == ["cpu-baseline"]


def test_errors_name_the_file(tmp_path: Path) -> None:
    _project(tmp_path, '[tool.aot-build]\ntarget = ["cpu"]\n')
    with pytest.raises(ConfigError) as info:
        load_settings(tmp_path, environ={})
    assert str(tmp_path / "pyproject.toml") in str(info.value)
    assert "Did you mean 'targets'?" in str(info.value)


def test_table_must_be_a_table(tmp_path: Path) -> None:
    _project(tmp_path, '[tool]\naot-build = "yes"\n')
    with pytest.raises(ConfigError, match=r"\[tool.aot-build\] must be a table"):
        load_settings(tmp_path, environ={})


def test_invalid_toml(tmp_path: Path) -> None:
    _project(tmp_path, "[tool.aot-build\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(tmp_path, environ={})


def test_json_schema_documents_every_field() -> None:
    schema = json_schema()
    json.dumps(schema)  # serialisable
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    fields = {f.name.replace("_", "-"): f for f in dataclasses.fields(Settings)}
    assert set(props) == set(fields)
    defaults = Settings()
    for key, prop in props.items():
        assert isinstance(prop["description"], str) and len(prop["description"]) > 20, key
        assert prop["type"] in {"array", "boolean", "integer", "object", "string"}, key
        assert prop["default"] == getattr(defaults, fields[key].name), key
        if prop["type"] == "array":
            assert prop["items"] == {"type": "string"}
    assert "AOT_BUILD_TARGETS" in props["targets"]["description"]
    assert props["strip"]["type"] == "boolean"
    assert props["inductor-options"]["type"] == "object"
    assert props["cache-max-size"]["type"] == "string" and props["cache"]["default"] is True
    assert props["jobs"] == {**props["jobs"], "type": "integer", "minimum": 0, "default": 0}
    assert "AOT_BUILD_JOBS" in props["jobs"]["description"]


@pytest.mark.parametrize("value", [-1, 1.5, "2", True])
def test_jobs_must_be_a_count(value: object) -> None:
    with pytest.raises(ConfigError, match=r"jobs must be integer \(int, at least 0\)"):
        settings_from_table({"jobs": value}, "p/pyproject.toml")


def test_jobs_from_the_environment(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.aot-build]\njobs = 3\n")
    assert load_settings(tmp_path, {}) == Settings(jobs=3)
    assert load_settings(tmp_path, {"AOT_BUILD_JOBS": "5"}) == Settings(jobs=5)
    with pytest.raises(ConfigError, match="AOT_BUILD_JOBS in the environment: jobs must be a whole number"):
        load_settings(tmp_path, {"AOT_BUILD_JOBS": "many"})


def test_cache_max_size_must_be_a_size() -> None:
    with pytest.raises(ConfigError, match=r"cache-max-size 'lots' is not a size; write e.g. \"5GB\""):
        settings_from_table({"cache-max-size": "lots"}, "p/pyproject.toml")


@pytest.mark.parametrize("key", ["cpp.march", "cpp.simdlen", "cpp.dynamic_threads", "cpp.threads"])
def test_inductor_options_may_not_set_what_targets_set(key: str) -> None:
    expected = rf"p/pyproject.toml: .*inductor-options sets {key}, which aot_build sets per target"
    with pytest.raises(ConfigError, match=expected):
        settings_from_table({"inductor-options": {key: 1, "max_autotune": True}}, "p/pyproject.toml")


def test_schema_accepts_what_the_reader_accepts() -> None:
    """Every default from the schema is a valid value for the reader."""
    table = {k: v["default"] for k, v in json_schema()["properties"].items()}
    assert settings_from_table(table) == Settings()


def test_manylinux_floor_default_values_and_environment(tmp_path: Path) -> None:
    """``manylinux``: "2_28" by default, another known policy or "host"; AOT_BUILD_MANYLINUX
    overrides it; anything else is refused naming the file (or variable) and the valid values."""
    assert Settings().manylinux == "2_28"
    assert json_schema()["properties"]["manylinux"]["default"] == "2_28"
    assert "AOT_BUILD_MANYLINUX" in json_schema()["properties"]["manylinux"]["description"]
    for value in ("host", "2_17", "2_34", "2_28"):
        assert settings_from_table({"manylinux": value}).manylinux == value
    (tmp_path / "pyproject.toml").write_text('[tool.aot-build]\nmanylinux = "2_31"\n')
    assert load_settings(tmp_path, {}) == Settings(manylinux="2_31")
    assert load_settings(tmp_path, {"AOT_BUILD_MANYLINUX": "host"}) == Settings(manylinux="host")
    with pytest.raises(ConfigError, match=r"AOT_BUILD_MANYLINUX in the environment: '2_29' is not a"):
        load_settings(tmp_path, {"AOT_BUILD_MANYLINUX": "2_29"})
    for bad in ("2.28", "manylinux2014", "", "3_1"):
        with pytest.raises(ConfigError) as info:
            settings_from_table({"manylinux": bad}, "p/pyproject.toml")
        msg = str(info.value)
        assert msg.startswith("p/pyproject.toml: [tool.aot-build] manylinux:"), msg
        assert '"2_28" (the default' in msg and '"host"' in msg, msg
    with pytest.raises(ConfigError, match="manylinux must be string"):
        settings_from_table({"manylinux": 228})


def test_docs_hold_the_generated_settings_table() -> None:
    """docs/configuration.md's table is generated from Settings' field docs (one home for
    each setting's words): regenerate it with ``python -m aot_build schema --markdown``."""
    page = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    table = markdown_table()
    assert table in page.read_text(encoding="utf-8"), (
        f"{page}: the [tool.aot-build] table is stale; replace it with the output of "
        "python -m aot_build schema --markdown"
    )
    assert len(table.splitlines()) == 2 + len(dataclasses.fields(Settings))
