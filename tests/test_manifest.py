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
    Guard,
    InputTensor,
    Leaf,
    Manifest,
    ObjPath,
    OutLeaf,
    TensorSpec,
    Variant,
    Weight,
)

FIXTURES = Path(__file__).parent / "fixtures"


def sample_manifest() -> Manifest:
    x = InputTensor("float32", "cpu", ("batch", 8), "contiguous")
    y = InputTensor("float32", "cpu", ({"sym": "batch", "mul": 2, "add": 0}, 8), "contiguous")
    z = InputTensor("float32", "cpu", (4, 8), "strides", (1, 4))
    w = TensorSpec((8, 8), "float32", "cpu", (8, 1))
    linear = ObjPath(("global", "pkg.mod", "LINEAR"))
    variant = Variant(
        inputs={"type": "tuple", "context": None, "children": [None] * 8},
        leaves=(
            Leaf(tensor=x),
            Leaf(tensor=y),
            Leaf(tensor=z),
            Leaf(value=3),
            Leaf(value=0.5),
            Leaf(value="mode"),
            Leaf(),
            Leaf(value=True),
        ),
        outputs={"type": "tuple", "context": None, "children": [None, None]},
        out_leaves=(OutLeaf("tensor"), OutLeaf("value", {"tuple": [1, 2]})),
        symbols={"batch": (2, 64)},
        weights=(
            Weight((linear.child("param", "weight"), linear.child("attr", "alias")), w),
            Weight((ObjPath(("self",)).child("buffer", "scale"),), TensorSpec((), "float32", "cpu", ())),
        ),
        guards=(
            Guard(linear, "type", "torch.nn.modules.linear:Linear"),
            Guard(linear.child("attr", "training"), "value", False),
            Guard(linear.child("attr", "_forward_hooks"), "len", 0),
            Guard(linear.child("getattr", "forward"), "absent", "method"),
            Guard(linear.child("item", 0), "same", linear.to_json()),
        ),
        embedded_constants=({"name": "c0", "shape": [3], "dtype": "float32", "bytes": 12},),
        input_set=1,
        pinned={"seq": 1},
        labels=("x", "y", "z", "k", "f", "s", "n", "b"),
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
    assert entry.variants[0].leaves[2].tensor == InputTensor("float32", "cpu", (4, 8), "strides", (1, 4))
    assert isinstance(entry.variants[0].weights[1].spec.shape, tuple)
    assert entry.variants[0].leaves[7].value is True
    assert entry.variants[0].signature() == (
        "x: float32[batch 2..64, 8], y: float32[2*batch, 8], z: float32[4, 8], k: 3, f: 0.5, "
        "s: 'mode', n: None, b: True with seq=1"
    )
    assert entry.variants[0].guards[0].path.label() == "pkg.mod.LINEAR"
    assert entry.variants[0].weights[1].paths[0].label() == "self.scale"


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
        (
            lambda r: r.update(format_version=MANIFEST_VERSION + 1),
            "format_version 4; this aot_build reads formats 1 to 3",
        ),
        (lambda r: r.update(format_version=0), "format_version 0"),
        (lambda r: r.update(format_version="1"), "format_version '1'"),
        (lambda r: r.pop("format_version"), "format_version None"),
        (lambda r: r.pop("torch_version"), r"damaged manifest \(KeyError"),
        (lambda r: r.pop("files"), r"damaged manifest \(KeyError"),
        (lambda r: r["entries"]["pkg.mod:fn"].pop("variants"), "damaged manifest"),
        (lambda r: r["entries"]["pkg.mod:fn"]["variants"][0]["leaves"][0]["tensor"].pop("dims"), "damaged"),
        (
            lambda r: r["entries"]["pkg.mod:fn"]["variants"][0]["guards"][0].update(kind="exec"),
            "unknown guard kind",
        ),
        (
            lambda r: r["entries"]["pkg.mod:fn"]["variants"][0]["guards"][0]["path"].update(root=["os"]),
            "bad path",
        ),
        (
            lambda r: r["entries"]["pkg.mod:fn"]["variants"][0]["out_leaves"][0].update(kind="x"),
            "output kind",
        ),
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
        "missing-dims",
        "unknown-guard",
        "bad-root",
        "bad-output",
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


def test_reads_format_1_and_upgrades_it() -> None:
    """A manifest written by aot-build 0.1.0 (format 1, frozen in tests/fixtures) is read as
    today's model: static shapes with exact strides, weights by getattr, training guards."""
    m = Manifest.read(FIXTURES / "format1" / "format1_pkg" / "_aot_build" / "manifest.json")
    assert m.read_version == 1
    (variant,) = m.entries["format1_pkg:affine"].variants
    (leaf,) = variant.leaves
    assert leaf.tensor == InputTensor("float32", "cpu", (4, 8), "strides", (8, 1))
    labels = [w.paths[0].label() for w in variant.weights]
    assert labels == ["format1_pkg.LINEAR.weight", "format1_pkg.LINEAR.bias", "format1_pkg.SCALE"]
    assert [(g.path.label(), g.kind, g.expect) for g in variant.guards] == [
        ("format1_pkg.LINEAR.training", "value", False)
    ]
    assert variant.out_leaves == (OutLeaf("tensor"),)
    assert variant.outputs is None


def test_extra_fields_are_ignored() -> None:
    """Fields a reader does not know (added within a format) do not make it refuse."""
    raw = _raw()
    raw["files"]["ab" * 12 + ".so"]["extra"] = 1
    raw["entries"]["pkg.mod:fn"]["note"] = "x"
    assert Manifest.from_dict(raw, "where") == sample_manifest()
