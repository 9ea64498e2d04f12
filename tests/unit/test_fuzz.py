"""Fuzzing the readers a wheel's author or a damaged install can feed anything: the manifest
reader (and what the shim builds from a record) and the ``[tool.aot-build]`` reader. Arbitrary
input ends in the reader's own error type, never in another exception."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_manifest import sample_manifest

from aot_build.errors import ConfigError, ManifestError
from aot_build.guards.bound import BoundState
from aot_build.load import shim
from aot_build.load.checks import RefusingCheck
from aot_build.manifest import Manifest
from aot_build.settings import load_settings, settings_from_table

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=24,
)

SAMPLE: dict[str, Any] = json.loads(sample_manifest().to_json())


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


PATHS = [p for p in _paths(SAMPLE) if p]


def _replace(raw: Any, path: tuple[Any, ...], value: Any) -> Any:
    raw = copy.deepcopy(raw)
    node = raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return raw


def _use(raw: Any) -> None:
    """Everything the shim does with a manifest short of loading a library: the reader may
    raise only ManifestError; a runner that cannot be made is a fallback (``bind`` catches
    it); a made runner's guard tree binds or gives the reason it cannot (a tree read lazily is
    checked only then), and its check and result builder never raise, they refuse every call."""
    m = Manifest.from_dict(raw, "fuzz.json", lazy=True)
    for key in list(m.unparsed):
        entry = m.entry(key)
        if entry is None:
            continue
        for v in entry.variants:
            try:
                runner = shim._VariantRunner(v, Path("/nonexistent"), m, frozenset(), None)
            except Exception:  # shim.bind turns any of these into a fallback
                continue
            state = runner.state  # bound, or a Miss naming why not: never an exception
            assert isinstance(state, (BoundState, shim.Miss))
            check = runner.check
            if isinstance(check, RefusingCheck):
                assert check.fast() == 0 and "cannot use its manifest record" in check.failures[0].explain()
            runner.build  # noqa: B018 - generated here; a refusing builder raises Miss per call


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_manifest_reader_on_arbitrary_json(raw: Any) -> None:
    try:
        _use(raw)
    except ManifestError:
        pass


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATHS), json_values)
def test_manifest_reader_on_a_valid_manifest_with_one_part_replaced(
    path: tuple[Any, ...], value: Any
) -> None:
    try:
        _use(_replace(SAMPLE, path, value))
    except ManifestError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_manifest_file_of_arbitrary_bytes(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("m") / "manifest.json"
    path.write_bytes(data)
    with pytest.raises(ManifestError):
        Manifest.read(path)


toml_keys = st.sampled_from(
    ["targets", "optional-targets", "modules", "exclude", "strip", "inductor-options", "target", "Strip", ""]
) | st.text(max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(toml_keys, json_values, max_size=5))
def test_settings_reader_on_arbitrary_tables(table: dict[str, Any]) -> None:
    try:
        settings_from_table(table, "fuzz/pyproject.toml")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz/pyproject.toml: ")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_pyproject_of_arbitrary_bytes(tmp_path_factory: pytest.TempPathFactory, data: bytes) -> None:
    project = tmp_path_factory.mktemp("p")
    (project / "pyproject.toml").write_bytes(b"[tool.aot-build]\n" + data)
    try:
        load_settings(project, environ={})
    except ConfigError as exc:
        assert str(project / "pyproject.toml") in str(exc)
