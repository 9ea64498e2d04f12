"""The units a build is made of, and their files: shared by the setuptools build (one process
and its workers) and the Bazel rules (one action per unit).

1. *export* (per entry): the entry's manifest record, its variants without artifacts yet,
   and the exported programs they need, saved with ``torch.export.save`` (example inputs left
   out) and named by their content: ``<folder>/entry.json`` and ``<folder>/<hash>.pt2``;
2. *compile* (per program x target): a library, ``<folder>/<hash>.so``, described in
   ``<folder>/compiled.json``;
3. *assemble* (per build): each package's ``_aot_build/`` folder, its manifest joining the
   records of (1) to the libraries of (2).
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..constants import RULE_AOTI
from ..manifest import Artifact, Entry, FileRecord, Manifest, entry_from_json, entry_to_json
from ..rules import Built
from ..targets import Target

EXPORTED_NAME = "entry.json"
COMPILED_NAME = "compiled.json"
#: Stamped in both files; bumped when their layout changes.
UNITS_VERSION = 2


def _zeros(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device).zero_()
    return t


def program_bytes(ep: torch.export.ExportedProgram) -> bytes:
    """The exported program as ``torch.export.save`` writes it, its example inputs replaced
    by zeros of the same shapes, strides and dtypes (AOTInductor needs them, their values are
    often random, and they change nothing in the compiled code) and without stack traces."""
    saved = ep._example_inputs
    # Stack traces name the source files by absolute path (the build folder, a temporary
    # one in an isolated build): left in, no two builds would agree on the bytes.
    traces = {}
    for gm in ep.graph_module.modules():
        if isinstance(gm, torch.fx.GraphModule):
            for node in gm.graph.nodes:
                if "stack_trace" in node.meta:
                    traces[node] = node.meta.pop("stack_trace")
    try:
        if saved is not None:
            ep._example_inputs = torch.utils._pytree.tree_map(_zeros, saved)
        buf = io.BytesIO()
        torch.export.save(ep, buf)
        return buf.getvalue()
    finally:
        ep._example_inputs = saved
        for node, trace in traces.items():
            node.meta["stack_trace"] = trace


def program_name(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32] + ".pt2"


@dataclass
class ExportedEntry:
    """What exporting one entry gives: its record, and per variant the program file of each
    device (``programs[i]["cpu"]``)."""

    package: str
    entry: Entry
    programs: list[dict[str, str]]
    #: "module:qualname (file:line)", for messages.
    where: str
    #: The compile rule of every program of the entry.
    rule: str = RULE_AOTI

    @property
    def key(self) -> str:
        return self.entry.key

    def write(self, folder: Path) -> None:
        body = {
            "units_version": UNITS_VERSION,
            "package": self.package,
            "where": self.where,
            "entry": entry_to_json(self.entry),
            "programs": self.programs,
            "rule": self.rule,
        }
        (folder / EXPORTED_NAME).write_text(json.dumps(body, indent=1, sort_keys=True), encoding="utf-8")

    @classmethod
    def read(cls, folder: Path) -> ExportedEntry:
        raw = _read_stamped(folder / EXPORTED_NAME)
        return cls(raw["package"], entry_from_json(raw["entry"]), raw["programs"], raw["where"], raw["rule"])


@dataclass(frozen=True)
class Task:
    """Compile one program for one target."""

    program: str
    target: str
    rule: str
    #: The first entry needing it and its module (imported when loading the program needs
    #: operators the package registers).
    where: str = field(compare=False)
    module: str = field(compare=False)
    #: "module:qualname" and the variant's pinned sizes, for progress lines.
    label: str = field(compare=False, default="")


@dataclass
class Source:
    """What a compile is given: the program and, for CALL rules (compiled in the build
    process), the function with the variant's example arguments; see
    :class:`aot_build.rules.CompileRequest`."""

    program: torch.export.ExportedProgram
    function: Any = None
    args: tuple[Any, ...] = ()
    dynamic_shapes: Any = None
    grad: bool = False


@dataclass
class Compiled:
    """One compiled library."""

    program: str
    target: str
    file: str
    sha256: str
    size: int
    isa: str
    rule: str
    rule_version: str

    @classmethod
    def of(cls, task: Task, built: Built, rule_version: str) -> Compiled:
        return cls(
            task.program,
            task.target,
            built.path.name,
            built.sha256,
            built.size,
            built.isa,
            task.rule,
            rule_version,
        )

    def to_json(self) -> dict[str, Any]:
        return dict(vars(self))


def write_compiled(folder: Path, compiled: list[Compiled]) -> None:
    body = {"units_version": UNITS_VERSION, "compiled": [c.to_json() for c in compiled]}
    (folder / COMPILED_NAME).write_text(json.dumps(body, indent=1, sort_keys=True), encoding="utf-8")


def read_compiled(folder: Path) -> list[Compiled]:
    return [Compiled(**c) for c in _read_stamped(folder / COMPILED_NAME)["compiled"]]


def _read_stamped(path: Path) -> dict[str, Any]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(raw, dict) or raw.get("units_version") != UNITS_VERSION:
        raise ValueError(
            f"{path}: written by another aot_build (units_version {raw.get('units_version')!r}, "
            f"this one reads {UNITS_VERSION}); run every step with the same aot_build"
        )
    return raw


def tasks_of(exported: list[ExportedEntry], targets: list[Target]) -> list[Task]:
    """Every (program, target) to compile, once each, in a stable order."""
    seen: dict[tuple[str, str, str], Task] = {}
    for ex in exported:
        module = ex.entry.module
        for variant, programs in zip(ex.entry.variants, ex.programs, strict=True):
            pinned = ", ".join(f"{k}={v}" for k, v in variant.pinned.items())
            label = ex.key + (f" ({pinned})" if pinned else "")
            for t in targets:
                for program, role in roles(programs, t.device):
                    named = label if role == "inference" else f"{label} {role}"
                    seen.setdefault(
                        (program, t.name, ex.rule), Task(program, t.name, ex.rule, ex.where, module, named)
                    )
    return list(seen.values())


def roles(programs: dict[str, str], device: str) -> list[tuple[str, str]]:
    """(program, role) of one device in a variant's programs (``cpu``: inference;
    ``cpu/forward``, ``cpu/backward``: a training entry's), in a fixed order."""
    out = []
    for key, program in sorted(programs.items()):
        d, _, role = key.partition("/")
        if d == device:
            out.append((program, role or "inference"))
    return out


def assemble(
    exported: list[ExportedEntry],
    compiled: list[Compiled],
    targets: list[Target],
    header: Manifest,
    evaluator: Built | None = None,
) -> dict[str, Manifest]:
    """Each package's manifest: the exported records with their artifacts filled in from
    ``compiled``, entries and files in sorted order. ``header`` gives the build-wide fields;
    ``evaluator``: the compiled guard evaluator every package ships."""
    by_unit = {(c.program, c.target, c.rule): c for c in compiled}
    manifests: dict[str, Manifest] = {}
    for ex in sorted(exported, key=lambda e: e.key):
        m = manifests.get(ex.package)
        if m is None:
            m = manifests[ex.package] = replace(header, package=ex.package, entries={}, files={})
            if evaluator is not None:
                m.evaluator = evaluator.path.name
                m.files[m.evaluator] = FileRecord(evaluator.sha256, evaluator.size)
        variants = []
        for variant, programs in zip(ex.entry.variants, ex.programs, strict=True):
            artifacts = []
            for t in targets:
                for program, role in roles(programs, t.device):
                    c = by_unit[(program, t.name, ex.rule)]
                    m.files[c.file] = FileRecord(c.sha256, c.size)
                    artifacts.append(Artifact(t.name, t.device, c.rule, c.file, c.isa, c.rule_version, role))
            variants.append(replace(variant, artifacts=tuple(artifacts)))
        m.entries[ex.key] = replace(ex.entry, variants=tuple(variants))
    for m in manifests.values():
        m.files = dict(sorted(m.files.items()))
    return manifests
