"""The manifest: a lossless JSON round trip, and refusal of anything else."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from aot_build.constants import MANIFEST_FORMAT, MANIFEST_VERSION
from aot_build.errors import ManifestError
from aot_build.manifest import (
    Artifact,
    Entry,
    FileRecord,
    Leaf,
    Manifest,
    ModuleState,
    TensorSpec,
    Variant,
    WeightBinding,
)


def sample_manifest() -> Manifest:
    x = TensorSpec((4, 8), "float32", "cpu", (8, 1))
    w = TensorSpec((8, 8), "float32", "cpu", (8, 1))
    variant = Variant(
        in_tree='[1, {"type": "builtins.tuple"}]',
        leaves=(Leaf(tensor=x), Leaf(value=3), Leaf(value=0.5), Leaf(value="mode"), Leaf(), Leaf(value=True)),
        out_tree='[1, {"type": null}]',
        weights=(
            WeightBinding("pkg.mod", "LINEAR", "weight", w),
            WeightBinding("pkg.mod", "SCALE", "", TensorSpec((), "float32", "cpu", ())),
        ),
        modules=(ModuleState("pkg.mod", "LINEAR", False),),
        embedded_constants=({"name": "c0", "shape": [3], "dtype": "float32", "bytes": 12},),
        artifacts=(
            Artifact("cpu-avx2", "cpu", "aoti", "ab" * 12 + ".so", "AVX2"),
            Artifact("cuda-sm90", "cuda", "aoti", "cd" * 12 + ".so"),
        ),
    )
    return Manifest(
        package="pkg",
        aot_build_version="0.1.0",
        torch_version="2.13.0+cpu",
        python_version="3.11",
        machine="x86_64",
        entries={"pkg.mod:fn": Entry("pkg.mod", "fn", "pkg/mod.py:12", (variant,))},
        skipped_targets=[{"target": "cuda-sm80", "reason": "no CUDA device"}],
        files={
            "ab" * 12 + ".so": FileRecord("ab" * 32, 1234),
            "cd" * 12 + ".so": FileRecord("cd" * 32, 99),
        },
    )


def test_round_trip_is_lossless() -> None:
    m = sample_manifest()
    text = m.to_json()
    raw = json.loads(text)
    assert raw["format"] == MANIFEST_FORMAT
    assert raw["format_version"] == MANIFEST_VERSION
    back = Manifest.from_dict(raw, "test")
    assert back == m
    assert back.to_json() == text
    entry = back.entries["pkg.mod:fn"]
    assert entry.key == "pkg.mod:fn"
    # tuples come back as tuples (hashable, comparable with live shapes)
    assert entry.variants[0].leaves[0].tensor == TensorSpec((4, 8), "float32", "cpu", (8, 1))
    assert isinstance(entry.variants[0].weights[1].spec.shape, tuple)
    assert entry.variants[0].leaves[5].value is True


def test_empty_manifest_round_trip() -> None:
    m = Manifest("p", "0.1.0", "2.13.0", "3.11", "x86_64")
    assert Manifest.from_dict(json.loads(m.to_json()), "x") == m


def test_write_and_read(tmp_path: Path) -> None:
    m = sample_manifest()
    path = tmp_path / "manifest.json"
    m.write(path)
    assert Manifest.read(path) == m
    assert sorted(p.name for p in tmp_path.iterdir()) == ["manifest.json"]  # no temp file left


def test_json_is_stable_and_sorted() -> None:
    text = sample_manifest().to_json()
    assert text.endswith("\n")
    raw = json.loads(text)
    assert list(raw) == sorted(raw)


def _raw() -> dict[str, Any]:
    return json.loads(sample_manifest().to_json())


@pytest.mark.parametrize(
    ("mutate", "match"),
    [
        (lambda r: r.pop("format"), "not an aot_build manifest"),
        (lambda r: r.update(format="something-else"), "not an aot_build manifest"),
        (lambda r: r.update(format_version=MANIFEST_VERSION + 1), "format_version 2, this aot_build reads 1"),
        (lambda r: r.update(format_version=0), "format_version 0"),
        (lambda r: r.update(format_version="1"), "format_version '1'"),
        (lambda r: r.pop("format_version"), "format_version None"),
        (lambda r: r.pop("torch_version"), r"damaged manifest \(KeyError"),
        (lambda r: r.pop("files"), r"damaged manifest \(KeyError"),
        (lambda r: r["entries"]["pkg.mod:fn"].pop("variants"), "damaged manifest"),
        (lambda r: r["entries"]["pkg.mod:fn"]["variants"][0]["leaves"][0]["tensor"].pop("stride"), "damaged"),
        (lambda r: r["files"]["ab" * 12 + ".so"].update(extra=1), r"damaged manifest \(TypeError"),
        (lambda r: r["entries"].update({"k": "not a dict"}), "damaged manifest"),
    ],
    ids=[
        "no-format",
        "other-format",
        "newer-version",
        "older-version",
        "string-version",
        "no-version",
        "missing-field",
        "missing-files",
        "missing-variants",
        "missing-stride",
        "extra-file-field",
        "entry-not-object",
    ],
)
def test_refuses_wrong_or_damaged(mutate: Any, match: str) -> None:
    raw = _raw()
    mutate(raw)
    with pytest.raises(ManifestError, match=match) as info:
        Manifest.from_dict(raw, "pkg/_aot_build/manifest.json")
    assert str(info.value).startswith("pkg/_aot_build/manifest.json: ")


@pytest.mark.parametrize("raw", [[], "manifest", None, 3])
def test_refuses_non_objects(raw: Any) -> None:
    with pytest.raises(ManifestError, match="not an aot_build manifest"):
        Manifest.from_dict(raw, "where")


@pytest.mark.parametrize("field", ["entries", "files"])
@pytest.mark.parametrize("value", [[], None], ids=["list", "null"])
def test_refuses_wrong_container_types(field: str, value: Any) -> None:
    raw = _raw()
    raw[field] = value
    with pytest.raises(ManifestError, match="damaged manifest"):
        Manifest.from_dict(raw, "where")


def test_read_refuses_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="cannot read manifest"):
        Manifest.read(tmp_path / "missing.json")
    bad = tmp_path / "truncated.json"
    bad.write_text(sample_manifest().to_json()[:100], encoding="utf-8")
    with pytest.raises(ManifestError, match="cannot read manifest"):
        Manifest.read(bad)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ManifestError, match=str(binary)):
        Manifest.read(binary)


def test_sample_is_not_mutated_by_reading() -> None:
    raw = _raw()
    before = copy.deepcopy(raw)
    Manifest.from_dict(raw, "x")
    assert raw == before
