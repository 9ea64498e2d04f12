"""The manifest: a lossless JSON round trip, and refusal of anything else."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aot_build.constants import MANIFEST_FORMAT, MANIFEST_VERSION
from aot_build.errors import ManifestError
from aot_build.guards.checks import Check
from aot_build.guards.paths import ObjPath
from aot_build.guards.tree import TensorSpec, TreeBuilder
from aot_build.manifest import (
    Artifact,
    Entry,
    FileRecord,
    InputTensor,
    Leaf,
    Manifest,
    OutLeaf,
    TrainingRecord,
    Variant,
)

FIXTURES = Path(__file__).parents[1] / "fixtures"


def sample_manifest() -> Manifest:
    x = InputTensor("float32", "cpu", ("batch", 8), "contiguous")
    y = InputTensor("float32", "cpu", ({"sym": "batch", "mul": 2, "add": 0}, 8), "contiguous")
    z = InputTensor("float32", "cpu", (4, 8), "strides", (1, 4))
    w = TensorSpec((8, 8), "float32", "cpu", (8, 1))
    linear = ObjPath(("global", "pkg.mod", "LINEAR"))
    tree = TreeBuilder()
    tree.weights = [w, TensorSpec((), "float32", "cpu", ())]
    tree.add(linear.child("getattr", "_parameters").child("item", "weight"), Check("weight", 0))
    tree.add(linear.child("getattr", "alias"), Check("weight", 0))
    tree.add(ObjPath(("self",)).child("getattr", "_buffers").child("item", "scale"), Check("weight", 1))
    first = tree.add(linear, Check("type", "torch.nn.modules.linear:Linear"))
    tree.add(linear.child("getattr", "training"), Check("eq", False))
    tree.add(linear.child("getattr", "_forward_hooks"), Check("len", 0))
    tree.add(linear.child("dict"), Check("lacks", "forward"))
    tree.add(
        linear.child("type").child("getattr", "forward"), Check("id", {"ref": "torch.nn:Linear.forward"})
    )
    tree.add(ObjPath(("global", "pkg.mod", "TABLE")).child("index", 0), Check("same", first))
    tree.add(
        ObjPath(("ref", "os:")).child("getattr", "environ").child("getattr", "_data"),
        Check("lacks", {"bytes": "4b"}),
    )
    tree.add(ObjPath(("closure", "z")), Check("eq", {"tuple": [1, 2.5]}))
    tree.add(ObjPath(("global", "pkg.mod", "FLAGS")), Check("has", "fast"))
    tree.add(ObjPath(("global", "pkg.mod", "CFG")), Check("hasattr", ["missing", False]))
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
        state=tree.tree(),
        embedded_constants=({"name": "c0", "shape": [3], "dtype": "float32", "bytes": 12},),
        input_set=1,
        size_one={"seq": 1},
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
    assert isinstance(entry.variants[0].state.weights[1].shape, tuple)
    assert entry.variants[0].leaves[7].value is True
    assert entry.variants[0].signature() == (
        "x: float32[batch 2..64, 8], y: float32[2*batch, 8], z: float32[4, 8], k: 3, f: 0.5, "
        "s: 'mode', n: None, b: True with seq=1"
    )
    state = entry.variants[0].state
    assert [[p.label() for p in paths] for paths in state.weight_paths()] == [
        ["pkg.mod.LINEAR.weight", "pkg.mod.LINEAR.alias"],
        ["self.scale"],
    ]
    assert {state.path(i).label() for i, c in state.checks() if c.kind == "type"} == {"pkg.mod.LINEAR"}
    assert ("type(pkg.mod.LINEAR).forward", "id") in {
        (state.path(i).label(), c.kind) for i, c in state.checks()
    }


def test_empty_manifest_round_trip() -> None:
    m = Manifest("p", "0.1.0", "2.13.0", "3.11", "x86_64")
    assert Manifest.from_dict(json.loads(m.to_json()), "x") == m


def test_write_and_read(tmp_path: Path) -> None:
    m = sample_manifest()
    path = tmp_path / "manifest.json"
    m.write(path)
    assert Manifest.read(path) == m
    (record,) = [name for name in m.files if name.endswith(".json")]  # the entry's own record
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["manifest.json", record])  # no temp file
    assert json.loads(path.read_text())["entries"] == {"pkg.mod:fn": record}
    lazy = Manifest.read(path, lazy=True)
    assert lazy.entries == {} and lazy.entry("pkg.mod:fn") == m.entries["pkg.mod:fn"]


def test_a_damaged_record_is_refused(tmp_path: Path) -> None:
    m = sample_manifest()
    m.write(tmp_path / "manifest.json")
    (record,) = [name for name in m.files if name.endswith(".json")]
    (tmp_path / record).write_text("{}", encoding="utf-8")
    with pytest.raises(ManifestError, match=f"its record {record} is damaged"):
        Manifest.read(tmp_path / "manifest.json", lazy=True).entry("pkg.mod:fn")
    (tmp_path / record).unlink()
    with pytest.raises(
        ManifestError, match=r"missing or unreadable \(No such file or directory\); reinstall"
    ):
        Manifest.read(tmp_path / "manifest.json")


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
            f"format_version {MANIFEST_VERSION + 1}; this aot_build reads formats 1 to {MANIFEST_VERSION}",
        ),
        (lambda r: r.update(format_version=0), "format_version 0"),
        (lambda r: r.update(format_version="1"), "format_version '1'"),
        (lambda r: r.pop("format_version"), "format_version None"),
        (lambda r: r.pop("torch_version"), r"damaged manifest \(KeyError"),
        (lambda r: r.pop("files"), r"damaged manifest \(KeyError"),
        (lambda r: r["entries"]["pkg.mod:fn"].pop("variants"), "damaged manifest"),
        (lambda r: r["entries"]["pkg.mod:fn"]["variants"][0]["leaves"][0]["tensor"].pop("dims"), "damaged"),
        (
            lambda r: r["entries"]["pkg.mod:fn"]["variants"][0]["state"]["nodes"][3][3].append(["exec", 1]),
            "unknown check kind",
        ),
        (
            lambda r: r["entries"]["pkg.mod:fn"]["variants"][0]["state"]["nodes"][0].__setitem__(2, ["os"]),
            "bad path root",
        ),
        (
            lambda r: r["entries"]["pkg.mod:fn"]["variants"][0]["state"]["nodes"][1].__setitem__(0, 5),
            "bad parent",
        ),
        (
            lambda r: r["entries"]["pkg.mod:fn"]["variants"][0]["state"]["nodes"][1].__setitem__(1, "eval"),
            "bad path step kind",
        ),
        (
            lambda r: r["entries"]["pkg.mod:fn"]["variants"][0]["out_leaves"][0].update(kind="x"),
            "output kind",
        ),
        (lambda r: r["entries"].update({"k": "not a dict"}), "'not a dict' is not a plain file name"),
        (lambda r: r["entries"].update({"k": 3}), "damaged manifest"),
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
        "unknown-check",
        "bad-root",
        "bad-parent",
        "bad-step",
        "bad-output",
        "entry-not-a-file-name",
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
    labels = [paths[0].label() for paths in variant.state.weight_paths()]
    assert labels == ["format1_pkg.LINEAR.weight", "format1_pkg.LINEAR.bias", "format1_pkg.SCALE"]
    state = variant.state
    assert [(state.path(i).label(), c.kind, c.expect) for i, c in state.checks() if c.kind != "weight"] == [
        ("format1_pkg.LINEAR.training", "eq", False)
    ]
    assert variant.out_leaves == (OutLeaf("tensor"),)
    assert variant.outputs is None


def test_reads_format_3_guards_and_weights_into_a_tree() -> None:
    """Format 2 and 3 manifests (aot-build 0.2, 0.3) listed guards and weights flat, with
    steps of their own; they are read into today's tree with the same meaning."""
    raw = _raw()
    raw["format_version"] = 3
    variant = raw["entries"]["pkg.mod:fn"]["variants"][0]
    del variant["state"]
    linear = {"root": ["global", "pkg.mod", "LINEAR"], "steps": []}
    variant["weights"] = [
        {
            "paths": [{"root": ["global", "pkg.mod", "LINEAR"], "steps": [["param", "weight"]]}],
            "spec": {"shape": [8, 8], "dtype": "float32", "device": "cpu", "stride": [8, 1]},
        },
    ]
    variant["guards"] = [
        {"path": linear, "kind": "type", "expect": "torch.nn.modules.linear:Linear"},
        {"path": {**linear, "steps": [["attr", "training"]]}, "kind": "value", "expect": False},
        {"path": {**linear, "steps": [["getattr", "forward"]]}, "kind": "absent", "expect": "method"},
        {"path": {**linear, "steps": [["attr", "_forward_hooks"]]}, "kind": "keys", "expect": {"list": []}},
        {"path": {**linear, "steps": [["child", "0"]]}, "kind": "same", "expect": linear},
    ]
    state = Manifest.from_dict(raw, "x").entries["pkg.mod:fn"].variants[0].state
    assert [p.label() for (p,) in state.weight_paths()] == ["pkg.mod.LINEAR.weight"]
    got = {(state.path(i).label(), c.kind, str(c.expect)) for i, c in state.checks() if c.kind != "weight"}
    root = state.nodes.index(next(n for n in state.nodes if n.step == "global"))
    assert got == {
        (label, kind, str(expect))
        for label, kind, expect in [
            ("pkg.mod.LINEAR", "type", "torch.nn.modules.linear:Linear"),
            ("pkg.mod.LINEAR.training", "eq", False),
            ("pkg.mod.LINEAR.__dict__", "lacks", "forward"),
            ("pkg.mod.LINEAR._forward_hooks", "keys", {"list": []}),
            ("pkg.mod.LINEAR.0", "same", root),
        ]
    }


def test_extra_fields_are_ignored() -> None:
    """Fields a reader does not know (added within a format) do not make it refuse."""
    raw = _raw()
    raw["files"]["ab" * 12 + ".so"]["extra"] = 1
    raw["entries"]["pkg.mod:fn"]["note"] = "x"
    assert Manifest.from_dict(raw, "where") == sample_manifest()


def test_training_record_round_trips_and_is_versioned_by_content() -> None:
    record = TrainingRecord(2, 1, 3, 1, (True, False), (True,), (0,), (), "min_cut")
    assert record.version == 1 and "mutated" not in record.to_json()
    updated = replace(record, mutated=(1,))
    assert updated.version == 2 and updated.to_json()["mutated"] == [1]
    for r in (record, updated):
        assert TrainingRecord.from_json(json.loads(json.dumps(r.to_json()))) == r
    with pytest.raises(ValueError, match="training record version 3; this aot_build reads versions 1, 2"):
        TrainingRecord.from_json({**record.to_json(), "version": 3})
    with pytest.raises(ValueError, match="one flag per output"):
        TrainingRecord.from_json({**record.to_json(), "differentiable_outputs": [True, True]})
    raw = _raw()
    raw["entries"]["pkg.mod:fn"]["variants"][0]["training"] = record.to_json()
    assert Manifest.from_dict(raw, "x").entries["pkg.mod:fn"].variants[0].training == record


def test_sdpa_flags_round_trip_and_a_record_without_them_loads() -> None:
    """A variant's SDPA flags are written only where its program calls SDPA: a record without
    the field (every record before it, and those of programs without SDPA) loads with none."""
    raw = _raw()
    (variant,) = raw["entries"]["pkg.mod:fn"]["variants"]
    assert "sdpa" not in variant
    assert Manifest.from_dict(raw, "x").entries["pkg.mod:fn"].variants[0].sdpa == {}
    flags = {"flash_sdp_enabled": True, "math_sdp_enabled": True, "sdp_priority_order": [1, 2, 0, 3, 4]}
    m = sample_manifest()
    m.entries["pkg.mod:fn"].variants = (replace(m.entries["pkg.mod:fn"].variants[0], sdpa=flags),)
    back = Manifest.from_dict(json.loads(m.to_json()), "x")
    assert back == m and back.entries["pkg.mod:fn"].variants[0].sdpa == flags
    for bad in ("yes", {"flash_sdp_enabled": "on"}, {"sdp_priority_order": [1.5]}):
        variant["sdpa"] = bad
        with pytest.raises(ManifestError, match="damaged manifest"):
            Manifest.from_dict(copy.deepcopy(raw), "x")


def test_a_call_rules_grad_artifact_of_format_3_reads_as_grad() -> None:
    """Format 3 named a call rule's grad-enabled artifact "forward" (no "backward" beside it);
    it reads as role "grad". A flat rule's forward and backward keep their roles."""
    raw = _raw()
    raw["format_version"] = 3
    artifacts = raw["entries"]["pkg.mod:fn"]["variants"][0]["artifacts"]
    artifacts[1] = {**artifacts[0], "role": "forward"}
    roles = [a.role for a in Manifest.from_dict(raw, "x").entries["pkg.mod:fn"].variants[0].artifacts]
    assert roles == ["inference", "grad"]
    artifacts.append({**artifacts[0], "role": "backward"})
    roles = [a.role for a in Manifest.from_dict(raw, "x").entries["pkg.mod:fn"].variants[0].artifacts]
    assert roles == ["inference", "forward", "backward"]


def test_program_keys_are_made_and_parsed_in_one_place() -> None:
    from aot_build.compile.units import ProgramKey

    assert str(ProgramKey("cpu")) == "cpu" and str(ProgramKey("cuda", "backward")) == "cuda/backward"
    for key in (ProgramKey("cpu"), ProgramKey("cpu", "forward"), ProgramKey("cpu", "grad")):
        assert ProgramKey.parse(str(key)) == key
    with pytest.raises(ValueError, match="role 'sideways'"):
        ProgramKey.parse("cpu/sideways")


@settings(max_examples=500, deadline=None)
@given(
    st.text(alphabet="aZ09_.-/ \\é\x00", max_size=6)
    | st.text(max_size=140)
    | st.sampled_from(["a" * 128, "a" * 129, "_x.so", ".so", "-x", "x/../y"])
)
def test_a_shipped_file_name_is_the_plain_names_rule(name: str) -> None:
    """The file-name check (a character set, not a regex, for the first call's sake) accepts
    exactly ``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}``."""
    import re

    from aot_build.manifest import _file_name

    plain = re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", name) is not None
    try:
        assert _file_name(name, "m.json") == name and plain
    except ManifestError as exc:
        assert not plain and "is not a plain file name" in str(exc)


def test_variants_with_the_same_guard_tree_share_it() -> None:
    """A dynamic entry's size-one variants read the same state as its general one: the record
    parses that tree once. Trees equal in Python but not in their types (``1`` and ``True``)
    stay apart, and the shim's runners share the bound state and weights of a shared tree."""
    from pathlib import Path

    from aot_build.load import shim

    raw = json.loads(sample_manifest().to_json())
    entry_raw = raw["entries"]["pkg.mod:fn"]
    general = entry_raw["variants"][0]
    same = copy.deepcopy(general)  # another variant, traced alike: an equal tree, its own JSON
    other = copy.deepcopy(general)
    nodes = other["state"]["nodes"]
    (i, check) = next((i, c) for i, n in enumerate(nodes) for c in n[3] if c[0] == "eq" and c[1] is False)
    check[1] = 0  # == False in Python; another guard
    entry_raw["variants"] = [general, same, other]
    entry = Manifest.from_dict(raw, "test").entries["pkg.mod:fn"]
    first, second, third = entry.variants
    assert second.state is first.state
    assert third.state is not first.state and third.state.nodes[i].checks[0].expect == 0
    assert type(third.state.nodes[i].checks[0].expect) is int
    runners: list[shim._VariantRunner] = []
    for v in entry.variants:
        runners.append(
            shim._VariantRunner(
                v, Path("/nonexistent"), Manifest.from_dict(raw, "t"), frozenset(), None, None, runners
            )
        )
    assert runners[1].shares is runners[0] and runners[2].shares is None
    assert runners[1].state is runners[0].state and runners[2].state is not runners[0].state
