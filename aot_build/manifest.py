"""The manifest: what a wheel holds for each entry, written by the build and read by the shim.

Layout (JSON, one per top-level package, at ``<package>/_aot_build/manifest.json``)::

    format, format_version          stamp; readers refuse newer versions, upgrade older ones
    package, aot_build_version, torch_version, python_version, machine
    entries: {"pkg.mod:func": "<sha256>.json"}   each entry's record in its own file (or inline)
    skipped_targets: [{"target", "reason"}]
    evaluator: "<sha256>.so"                     the compiled guard evaluator (aot_build.guards.native)
    files: {"<sha256>.so": {"sha256", "size"}}   every artifact and record, stored once by content

An entry has variants (one per example-input set, plus automatic size-one variants),
a variant has artifacts (one per target). A variant says exactly which calls it serves
(input specs with dynamic dimensions and their ranges) and what else the compiled code
depends on (its guard tree: weights read by path and every read of package state, see
:mod:`aot_build.guards`); the shim checks all of it on every call.

Format history: 1 (aot-build 0.1.0: static shapes, weights by global) is read and upgraded;
2 adds dynamic dimensions, guards, method entries and output leaves; 3 adds compile backends
(then called rules) other than ``aoti`` (each artifact's ``rule_version``) and training
entries (artifact roles and each variant's ``training`` record); 4 replaces a variant's
``guards`` and ``weights`` by its guard tree ``state`` (older guards and weights are read into
one), renames an artifact's ``rule`` and ``rule_version`` to ``backend`` and
``backend_version`` and a variant's ``pinned`` to ``size_one`` (the old keys are read), and
names a call backend's grad-enabled artifact ``grad`` (format 3 called it ``forward``, with no
``backward`` beside it). Optional fields added since are read as absent from older records
(a variant's ``sdpa``: none checked).
"""

from __future__ import annotations

import hashlib
import json
import marshal
import os
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import collector
from .constants import MANIFEST_FORMAT, MANIFEST_VERSION
from .records import record

if TYPE_CHECKING:
    import zipfile
from .errors import ManifestError
from .guards.tree import StateTree, TensorSpec

#: Upper bound stored for a dynamic dimension torch.export left unbounded.
UNBOUNDED = 2**63 - 1

#: Roles of an artifact: what its program computes.
ROLE_INFERENCE = "inference"
ROLE_FORWARD = "forward"
ROLE_BACKWARD = "backward"
ROLE_GRAD = "grad"
ROLES = {
    ROLE_INFERENCE: "the function's outputs",
    ROLE_FORWARD: "the outputs and the tensors backward needs (training entries, flat rules)",
    ROLE_BACKWARD: (
        "the gradients of the inputs and weights, from the saved tensors and the outputs' gradients"
    ),
    ROLE_GRAD: "the function for calls with grad enabled (training entries, call rules)",
}

#: Versions of the training record (:class:`TrainingRecord`) this aot_build reads; a record
#: is written as the oldest that holds it (1: no input updated in place).
TRAINING_VERSIONS = (1, 2)


@record(frozen=True)
class TrainingRecord:
    """How a training entry's ``forward`` and ``backward`` artifacts connect (flat rules;
    made by :mod:`aot_build.compile.joint`, used by :mod:`aot_build.load.autograd`).

    The forward program maps the ``num_inputs`` flat inputs to the new values of the inputs
    updated in place (``mutated``, in that order), then ``num_outputs`` user outputs, then
    ``num_saved`` saved tensors (the last ``shape_carriers`` of them zero-element tensors
    carrying a size). The backward program takes the saved tensors then one gradient per
    differentiable output (in output order) and returns the gradients of ``grad_inputs``
    (flat input indices), in order; ``absent_grads``: inputs that require grad but get None.

    Args:
        num_inputs: flat inputs (argument tensors, then weights).
        num_outputs: user outputs.
        num_saved: tensors the forward saves for the backward.
        shape_carriers: how many of the saved tensors carry a size only.
        requires_grad: per flat input: whether it takes a gradient.
        differentiable_outputs: per user output: whether it takes a gradient.
        grad_inputs: the inputs the backward returns gradients of.
        absent_grads: inputs that require grad but whose gradient is None.
        partitioner: the AOTAutograd partitioner that split the graph.
        mutated: inputs updated in place (version 2).
    """

    num_inputs: int
    num_outputs: int
    num_saved: int
    shape_carriers: int
    requires_grad: tuple[bool, ...]
    differentiable_outputs: tuple[bool, ...]
    grad_inputs: tuple[int, ...]
    absent_grads: tuple[int, ...] = ()
    partitioner: str = ""
    mutated: tuple[int, ...] = ()

    @property
    def version(self) -> int:
        """2 when inputs are updated in place (a version 1 reader would take their new values
        for user outputs), else 1."""
        return 2 if self.mutated else 1

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "version": self.version,
            "num_inputs": self.num_inputs,
            "num_outputs": self.num_outputs,
            "num_saved": self.num_saved,
            "shape_carriers": self.shape_carriers,
            "requires_grad": list(self.requires_grad),
            "differentiable_outputs": list(self.differentiable_outputs),
            "grad_inputs": list(self.grad_inputs),
            "absent_grads": list(self.absent_grads),
            "partitioner": self.partitioner,
        }
        if self.mutated:
            body["mutated"] = list(self.mutated)
        return body

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TrainingRecord:
        """The record in ``raw``; ValueError for a version this aot_build does not read or
        fields that do not agree."""
        if raw.get("version") not in TRAINING_VERSIONS:
            raise ValueError(
                f"training record version {raw.get('version')!r}; this aot_build reads versions "
                f"{', '.join(map(str, TRAINING_VERSIONS))}"
            )
        record = cls(
            int(raw["num_inputs"]),
            int(raw["num_outputs"]),
            int(raw["num_saved"]),
            int(raw.get("shape_carriers", 0)),
            tuple(bool(f) for f in raw.get("requires_grad", ())),
            tuple(bool(d) for d in raw["differentiable_outputs"]),
            tuple(int(i) for i in raw["grad_inputs"]),
            tuple(int(i) for i in raw.get("absent_grads", ())),
            str(raw.get("partitioner", "")),
            tuple(int(i) for i in raw.get("mutated", ())),
        )
        if len(record.differentiable_outputs) != record.num_outputs:
            raise ValueError("training record: differentiable_outputs does not have one flag per output")
        return record


#: One dimension of an input: a fixed size, a symbol (``"batch"``) or ``{"sym", "mul", "add"}``
#: (a size derived from a symbol, e.g. ``2*batch``).
DimSpec = int | str | dict[str, Any]


@record(repr=False)
class InputTensor:
    """What a tensor argument must look like.

    Args:
        dtype: dtype name.
        device: device type.
        dims: one :data:`DimSpec` per dimension.
        layout: ``contiguous`` or ``channels_last`` (any sizes, dense in that order), or
            ``strides`` (exactly ``stride``, static shapes only).
        stride: the strides, for layout ``strides``.
    """

    dtype: str
    device: str
    dims: tuple[DimSpec, ...]
    layout: str = "contiguous"
    stride: tuple[int, ...] = ()


@record(repr=False)
class Leaf:
    """One flattened argument: a tensor (``tensor`` set) or a plain value baked into the
    artifact (``value``, encoded by :mod:`aot_build.values`), which calls must repeat."""

    tensor: InputTensor | None = None
    value: Any = None


@record(repr=False)
class OutLeaf:
    """One flattened output.

    Args:
        kind: ``tensor`` (the next library output), ``sym`` (the next library output, a
            0-d tensor holding an int/float/bool computed from sizes), ``value`` (a plain
            value, returned as it is), ``input`` (the caller's own argument leaf ``index``),
            ``weight`` (lifted weight ``index``, as the caller's object).
        value: encoded value, for ``value``; the Python type name, for ``sym``.
        index: for ``input`` and ``weight``.
    """

    kind: str
    value: Any = None
    index: int = -1


@record(repr=False)
class Artifact:
    """One compiled file for one target.

    Args:
        target: target name, e.g. ``cpu-avx2``.
        device: device type of the tensors it takes.
        backend: compile backend that made it (``aoti``); see :mod:`aot_build.rules`.
        file: file name inside the artifact folder (content-addressed).
        isa: what the compiler reports about the code (e.g. ``AVX2``), for ``inspect``.
        backend_version: the backend's version; the shim loads it only with that version.
        role: :data:`ROLES` key: what the program computes.
    """

    target: str
    device: str
    backend: str
    file: str
    isa: str = ""
    backend_version: str = "1"
    role: str = ROLE_INFERENCE


@record(repr=False)
class Variant:
    """Compiled forms of an entry for one set of example inputs.

    Args:
        inputs: structure of the arguments (:mod:`aot_build.trees`), ``self`` excluded.
        leaves: one per flattened argument.
        symbols: each dynamic dimension's name and inclusive range ``[lo, hi]``.
        outputs: structure of the result; ``out_leaves`` one per flattened output.
        state: the guard tree: every read of package state the compiled code depends on,
            checked on every call, and the weights (in the order the artifact takes them after
            the inputs), see :mod:`aot_build.guards.tree`.
        input_set: index of the example-input set it was built from.
        size_one: dynamic dimensions fixed to size 1 for this variant (a size-one variant:
            torch.export specialises size 1, so a range including 1 gets its own artifacts).
        labels: one name per leaf for messages (``x``, ``batch['ids']``).
        training: for training entries (``backward=True``) compiled by a flat backend: how the
            ``forward`` and ``backward`` artifacts connect; None otherwise.
        mutated: the tensors the artifact writes in place (state updated in place), by index
            among the tensors it takes: the argument tensors in leaf order, then the weights.
        sdpa: for a program that calls scaled_dot_product_attention, torch's SDPA backend
            flags it was compiled under, by name (:mod:`aot_build.sdpa`), checked on every
            call; empty otherwise (and absent from the JSON; older records lack it).
    """

    inputs: Any
    leaves: tuple[Leaf, ...]
    outputs: Any
    out_leaves: tuple[OutLeaf, ...]
    symbols: dict[str, tuple[int, int]] = field(default_factory=dict)
    state: StateTree = field(default_factory=StateTree)
    embedded_constants: tuple[dict[str, Any], ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    input_set: int = 0
    size_one: dict[str, int] = field(default_factory=dict)
    labels: tuple[str, ...] = ()
    training: TrainingRecord | None = None
    mutated: tuple[int, ...] = ()
    sdpa: dict[str, Any] = field(default_factory=dict)

    def label(self, i: int) -> str:
        return self.labels[i] if i < len(self.labels) else f"argument leaf {i}"

    def signature(self) -> str:
        """``x: float32[batch 2..64, 16], k: 3`` (size-one dimensions shown as ``batch=1``)."""
        parts = []
        for i, lf in enumerate(self.leaves):
            if lf.tensor is None:
                parts.append(f"{self.label(i)}: {lf.value!r}")
                continue
            dims = []
            for d in lf.tensor.dims:
                if isinstance(d, int):
                    dims.append(str(d))
                elif isinstance(d, str):
                    lo, hi = self.symbols.get(d, (0, 0))
                    dims.append(f"{d} {lo}..{hi if hi < UNBOUNDED else 'inf'}")
                else:
                    dims.append(f"{d['mul']}*{d['sym']}+{d['add']}" if d["add"] else f"{d['mul']}*{d['sym']}")
            parts.append(f"{self.label(i)}: {lf.tensor.dtype}[{', '.join(dims)}]")
        ones = f" with {', '.join(f'{k}={v}' for k, v in self.size_one.items())}" if self.size_one else ""
        return ", ".join(parts) + ones


@record(repr=False)
class Entry:
    """One ``@aot_entry`` function or method. ``source`` is ``path/to/mod.py:LINE``."""

    module: str
    qualname: str
    source: str
    variants: tuple[Variant, ...] = ()
    method: bool = False

    @property
    def key(self) -> str:
        return f"{self.module}:{self.qualname}"


#: What a shipped file may be called: a plain name in the artifact folder, no path, not hidden
#: (``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}``; a set, not a regex: compiling one costs a first call).
_FILE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")


def _file_name(name: Any, where: str) -> str:
    """``name`` if it is a plain file name; a manifest naming ``../x.so`` or ``/lib/y.so``
    would make the shim load a library from outside the package."""
    if (
        not isinstance(name, str)
        or not 0 < len(name) <= 128
        or name[0] in ".-"
        or not _FILE_CHARS.issuperset(name)
    ):
        raise ManifestError(
            f"{where}: file name {name!r} is not a plain file name in the artifact folder; "
            "the manifest is damaged or was tampered with: reinstall the package"
        )
    return name


@record(repr=False)
class FileRecord:
    sha256: str
    size: int


@record
class Manifest:
    """Everything a wheel's shim needs to know about one top-level package."""

    package: str
    aot_build_version: str
    torch_version: str
    python_version: str
    machine: str
    entries: dict[str, Entry] = field(default_factory=dict)
    skipped_targets: list[dict[str, str]] = field(default_factory=list)
    files: dict[str, FileRecord] = field(default_factory=dict)
    #: torch's default dtype in the build (tensors the function creates get it).
    default_dtype: str = "float32"
    #: File name of the compiled guard evaluator (:mod:`aot_build.guards.native`), listed in
    #: ``files``; "" when the wheel ships none (the shim then checks guards in Python).
    evaluator: str = ""
    #: Format version of the file this was read from (upgraded in memory when older).
    read_version: int = MANIFEST_VERSION
    #: Entries not parsed yet (``lazy`` reading), by key: their JSON, or the name of the record
    #: file that holds it; see :meth:`entry`.
    unparsed: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    where: str = field(default="", compare=False, repr=False)
    #: The folder record files are read from (a folder inside a wheel: a ``zipfile.Path``).
    folder: Path | zipfile.Path | None = field(default=None, compare=False, repr=False)

    def entry(self, key: str) -> Entry | None:
        """The entry ``key`` (parsed now when read lazily), or None; ManifestError when its
        record is damaged. Read lazily, its guard trees' nodes are checked when they are bound
        (the shim then falls back, naming the node) or first asked for."""
        if key not in self.entries and key in self.unparsed:
            parse = _entry_v1 if self.read_version == 1 else _entry
            raw = self.unparsed.pop(key)
            try:
                with collector.paused():
                    self.entries[key] = parse(self._record(key, raw) if isinstance(raw, str) else raw)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
                raise ManifestError(
                    f"{self.where}: damaged entry {key} ({type(exc).__name__}: {exc})"
                ) from exc
        return self.entries.get(key)

    def _record(self, key: str, name: str) -> Any:
        """An entry's record from its own file, checked against the hash the manifest lists."""
        record = self.files.get(name)
        if self.folder is None or record is None:
            raise ValueError(f"record file {name} is not listed in the manifest")
        try:
            data = (self.folder / name).read_bytes()
        except OSError as exc:
            raise ManifestError(
                f"{self.where}: entry {key}: its record {name} is missing or unreadable ({exc.strerror}); "
                "reinstall the package"
            ) from exc
        if hashlib.sha256(data).hexdigest() != record.sha256:
            raise ManifestError(
                f"{self.where}: entry {key}: its record {name} is damaged (sha256 differs from the "
                "manifest); reinstall the package"
            )
        return json.loads(data)

    def to_json(self, records: dict[str, str] | None = None) -> str:
        """The manifest as JSON: entries inline, or (``records``) by the names of their files."""
        entries = records if records is not None else {k: _entry_json(e) for k, e in self.entries.items()}
        body = {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_VERSION,
            "package": self.package,
            "aot_build_version": self.aot_build_version,
            "torch_version": self.torch_version,
            "python_version": self.python_version,
            "machine": self.machine,
            "default_dtype": self.default_dtype,
            "evaluator": self.evaluator,
            "entries": entries,
            "skipped_targets": self.skipped_targets,
            "files": {k: {"sha256": f.sha256, "size": f.size} for k, f in self.files.items()},
        }
        return json.dumps(body, indent=1, sort_keys=True) + "\n"

    def write(self, path: Path) -> None:
        """Write ``path`` and, beside it, each entry's record in a file of its own, named by its
        content and listed in :attr:`files` (a first call reads only its entry's record).
        Atomically: a reader never sees half a file."""
        records: dict[str, str] = {}
        for key, entry in sorted(self.entries.items()):
            data = json.dumps(_entry_json(entry), sort_keys=True, separators=(",", ":")).encode()
            sha = hashlib.sha256(data).hexdigest()
            name = records[key] = f"{sha[:24]}.json"
            _write_atomically(path.parent / name, data)
            self.files[name] = FileRecord(sha, len(data))
        self.files = dict(sorted(self.files.items()))
        _write_atomically(path, self.to_json(records).encode())

    @classmethod
    def read(cls, path: Path, lazy: bool = False) -> Manifest:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ManifestError(f"{path}: cannot read manifest: {exc}") from exc
        return cls.from_dict(raw, str(path), lazy, path.parent)

    @classmethod
    def from_dict(
        cls, raw: Any, where: str, lazy: bool = False, folder: Path | zipfile.Path | None = None
    ) -> Manifest:
        """Validate and parse. ``lazy``: entries are parsed when first asked for
        (:meth:`entry`), so importing a package with many entries parses only those called.
        ``folder``: where the entries' record files are (an entry given by file name)."""
        if not isinstance(raw, dict) or raw.get("format") != MANIFEST_FORMAT:
            raise ManifestError(f"{where}: not an aot_build manifest (no format stamp)")
        version = raw.get("format_version")
        if type(version) is not int or not 1 <= version <= MANIFEST_VERSION:
            raise ManifestError(
                f"{where}: manifest format_version {version!r}; this aot_build reads formats 1 to "
                f"{MANIFEST_VERSION}: upgrade aot-build (pip install -U aot-build)"
            )
        try:
            parse_entry = _entry_v1 if version == 1 else _entry
            entries = raw["entries"]
            if not isinstance(entries, dict):
                raise TypeError(f"entries is a {type(entries).__name__}")
            manifest = cls(
                package=str(raw["package"]),
                aot_build_version=str(raw["aot_build_version"]),
                torch_version=str(raw["torch_version"]),
                python_version=str(raw["python_version"]),
                machine=str(raw["machine"]),
                default_dtype=str(raw.get("default_dtype", "float32")),
                evaluator=_file_name(raw["evaluator"], where) if raw.get("evaluator") else "",
                entries={},
                skipped_targets=[dict(s) for s in raw.get("skipped_targets", [])],
                files={
                    _file_name(k, where): FileRecord(str(v["sha256"]), int(v["size"]))
                    for k, v in raw["files"].items()
                },
                read_version=version,
                unparsed={
                    str(k): _file_name(v, where) if isinstance(v, str) else v for k, v in entries.items()
                },
                where=where,
                folder=folder,
            )
            if not lazy:
                for key in list(manifest.unparsed):
                    value = manifest.unparsed.pop(key)
                    entry = manifest.entries[key] = parse_entry(
                        manifest._record(key, value) if isinstance(value, str) else value
                    )
                    for v in entry.variants:
                        v.state.nodes  # noqa: B018 -- parsed and checked now (a lazy read leaves it to the bind)
            return manifest
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
            raise ManifestError(f"{where}: damaged manifest ({type(exc).__name__}: {exc})") from exc


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------- JSON of the parts


def _dim(raw: Any) -> DimSpec:
    if type(raw) is int or type(raw) is str:
        return raw
    return {"sym": str(raw["sym"]), "mul": int(raw["mul"]), "add": int(raw["add"])}


def _leaf_json(lf: Leaf) -> dict[str, Any]:
    if lf.tensor is None:
        return {"value": lf.value}
    t = lf.tensor
    return {
        "tensor": {
            "dtype": t.dtype,
            "device": t.device,
            "dims": list(t.dims),
            "layout": t.layout,
            "stride": list(t.stride),
        }
    }


def _leaf(raw: dict[str, Any]) -> Leaf:
    t = raw.get("tensor")
    if t is None:
        return Leaf(value=raw.get("value"))
    layout = str(t.get("layout", "contiguous"))
    if layout not in ("contiguous", "channels_last", "strides"):
        raise ValueError(f"unknown layout {layout!r}")
    return Leaf(
        tensor=InputTensor(
            str(t["dtype"]),
            str(t["device"]),
            tuple(_dim(d) for d in t["dims"]),
            layout,
            tuple(int(x) for x in t.get("stride", ())),
        )
    )


def _variant_json(v: Variant) -> dict[str, Any]:
    body: dict[str, Any] = {
        "inputs": v.inputs,
        "leaves": [_leaf_json(lf) for lf in v.leaves],
        "outputs": v.outputs,
        "out_leaves": [{"kind": o.kind, "value": o.value, "index": o.index} for o in v.out_leaves],
        "symbols": {k: list(r) for k, r in v.symbols.items()},
        "state": v.state.to_json(),
        "embedded_constants": list(v.embedded_constants),
        "artifacts": [
            {
                "target": a.target,
                "device": a.device,
                "backend": a.backend,
                "file": a.file,
                "isa": a.isa,
                "backend_version": a.backend_version,
                "role": a.role,
            }
            for a in v.artifacts
        ],
        "input_set": v.input_set,
        "size_one": dict(v.size_one),
        "labels": list(v.labels),
        "training": v.training.to_json() if v.training is not None else {},
        "mutated": list(v.mutated),
    }
    if v.sdpa:  # written only where used: records of programs without SDPA keep their bytes
        body["sdpa"] = dict(v.sdpa)
    return body


def _artifact(raw: dict[str, Any], grad_role: bool) -> Artifact:
    role = str(raw.get("role", ROLE_INFERENCE))
    if role not in ROLES:
        raise ValueError(f"unknown artifact role {role!r}")
    if grad_role and role == ROLE_FORWARD:
        role = ROLE_GRAD
    return Artifact(
        str(raw["target"]),
        str(raw["device"]),
        str(raw["backend"] if "backend" in raw else raw["rule"]),  # formats 1 to 3: "rule"
        str(raw["file"]),
        str(raw.get("isa", "")),
        # formats 1 to 3: "rule_version", absent in formats 1 and 2 (aoti, version 1)
        str(raw.get("backend_version", raw.get("rule_version", "1"))),
        role,
    )


def _out_leaf(raw: dict[str, Any]) -> OutLeaf:
    kind = str(raw["kind"])
    if kind not in ("tensor", "sym", "value", "input", "weight"):
        raise ValueError(f"unknown output kind {kind!r}")
    return OutLeaf(kind, raw.get("value"), int(raw.get("index", -1)))


def _variant(raw: dict[str, Any], trees: list[tuple[Any, StateTree]] | None = None) -> Variant:
    training = raw.get("training") or {}
    # Before "grad" (format 3 and early 4), a call rule's grad-enabled artifact was a
    # "forward" with no "backward" beside it; a flat rule's forward always has one.
    backward = any(a.get("role") == ROLE_BACKWARD for a in raw["artifacts"])
    return Variant(
        inputs=raw["inputs"],
        leaves=tuple(_leaf(x) for x in raw["leaves"]),
        outputs=raw["outputs"],
        out_leaves=tuple(_out_leaf(o) for o in raw["out_leaves"]),
        symbols={str(k): (int(r[0]), int(r[1])) for k, r in raw["symbols"].items()},
        state=_state(raw, [] if trees is None else trees),
        embedded_constants=tuple(dict(c) for c in raw["embedded_constants"]),
        artifacts=tuple(_artifact(a, grad_role=not backward) for a in raw["artifacts"]),
        input_set=int(raw.get("input_set", 0)),
        # formats 2 and 3: "pinned"
        size_one={str(k): int(v) for k, v in raw.get("size_one", raw.get("pinned", {})).items()},
        labels=tuple(str(x) for x in raw.get("labels", ())),
        training=TrainingRecord.from_json(training) if training else None,
        mutated=tuple(int(i) for i in raw.get("mutated", ())),
        sdpa=_sdpa(raw.get("sdpa", {})),
    )


def _sdpa(raw: Any) -> dict[str, Any]:
    """A variant's SDPA flags: on/off flags, and lists of ints (the backends' priority order)."""
    if not isinstance(raw, dict):
        raise TypeError(f"sdpa is a {type(raw).__name__}")
    for name, value in raw.items():
        if not (type(value) is bool or (type(value) is list and all(type(i) is int for i in value))):
            raise ValueError(f"sdpa flag {name!r} is {value!r}")
    return {str(k): v for k, v in raw.items()}


def _state(raw: dict[str, Any], trees: list[tuple[Any, StateTree]]) -> StateTree:
    """A variant's guard tree; formats 2 and 3 listed guards and weights instead.

    ``trees``: the entry's trees parsed so far, with their JSON. A dynamic entry's size-one
    variants are traced from the same code and state as its general one: the same JSON is
    parsed once and the variants share the tree (and the shim then its bound state). Equal
    means equal with the same types throughout (``1``, ``1.0`` and ``True`` are ``==`` in
    Python): ``==`` first, then marshal's bytes, which name each value's type."""
    if "state" not in raw:
        return _upgraded(raw["guards"], raw["weights"])
    state = raw["state"]
    for seen, tree in trees:
        if seen == state and marshal.dumps(seen, 2) == marshal.dumps(state, 2):
            return tree
    tree = StateTree.from_json(state)
    trees.append((state, tree))
    return tree


def _upgraded(guards: Any, weights: Any) -> StateTree:
    """Format 2 and 3's guards and weights as a guard tree (older wheels only)."""
    from .guards.upgrade import upgrade_state  # not imported by a current wheel's first call

    return upgrade_state(guards, weights)


def _entry_json(e: Entry) -> dict[str, Any]:
    return {
        "module": e.module,
        "qualname": e.qualname,
        "source": e.source,
        "method": e.method,
        "variants": [_variant_json(v) for v in e.variants],
    }


def _entry(raw: dict[str, Any]) -> Entry:
    trees: list[tuple[Any, StateTree]] = []  # an entry's variants mostly read the same state
    return Entry(
        module=str(raw["module"]),
        qualname=str(raw["qualname"]),
        source=str(raw["source"]),
        variants=tuple(_variant(v, trees) for v in raw["variants"]),
        method=bool(raw.get("method", False)),
    )


#: An entry's record as JSON and back (the build's intermediate files use them too).
entry_to_json = _entry_json
entry_from_json = _entry


# ---------------------------------------------------------------- format 1 (aot-build 0.1.0)


def _entry_v1(raw: dict[str, Any]) -> Entry:
    """A format-1 entry in today's terms: static shapes with exact strides, weights read by
    ``getattr`` below their global, and the ``training`` flags it recorded as guards."""
    return Entry(
        module=str(raw["module"]),
        qualname=str(raw["qualname"]),
        source=str(raw["source"]),
        variants=tuple(_variant_v1(v) for v in raw["variants"]),
    )


def _torch_tree(dumped: str) -> Any:
    from torch.utils import _pytree as pytree

    from . import trees

    return trees.encode(pytree.treespec_loads(dumped))


def _variant_v1(raw: dict[str, Any]) -> Variant:
    leaves = []
    for lf in raw["leaves"]:
        t = lf.get("tensor")
        if t is None:
            from . import values

            leaves.append(Leaf(value=values.encode(lf.get("value"))))
            continue
        spec = TensorSpec.from_json(t)
        leaves.append(Leaf(tensor=InputTensor(spec.dtype, spec.device, spec.shape, "strides", spec.stride)))
    weights = []
    for w in raw["weights"]:
        steps = [["getattr", part] for part in str(w["path"]).split(".")] if w["path"] else []
        path = {"root": ["global", str(w["module"]), str(w["name"])], "steps": steps}
        weights.append({"paths": [path], "spec": w["spec"]})
    guards = [
        {
            "path": {
                "root": ["global", str(m["module"]), str(m["name"])],
                "steps": [["getattr", "training"]],
            },
            "kind": "value",
            "expect": bool(m["training"]),
        }
        for m in raw["modules"]
    ]
    outputs = _torch_tree(raw["out_tree"])
    from . import trees

    n_out = trees.count_leaves(outputs)
    return Variant(
        inputs=_torch_tree(raw["in_tree"]),
        leaves=tuple(leaves),
        outputs=outputs,
        out_leaves=tuple(OutLeaf("tensor") for _ in range(n_out)),
        state=_upgraded(guards, weights),
        embedded_constants=tuple(dict(c) for c in raw["embedded_constants"]),
        artifacts=tuple(_artifact(a, grad_role=False) for a in raw["artifacts"]),
    )
