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

from ..backends import Built
from ..constants import BACKEND_AOTI
from ..manifest import (
    ROLE_INFERENCE,
    ROLES,
    Artifact,
    Entry,
    FileRecord,
    Manifest,
    entry_from_json,
    entry_to_json,
)
from ..targets import Target

EXPORTED_NAME = "entry.json"
COMPILED_NAME = "compiled.json"
#: Stamped in both files; bumped when their layout changes.
UNITS_VERSION = 3


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


@dataclass(frozen=True)
class ProgramKey:
    """Which of a variant's programs: its device and role (:data:`aot_build.manifest.ROLES`).
    Written ``cpu`` (inference) or ``cpu/backward`` in :attr:`ExportedEntry.programs`."""

    device: str
    role: str = ROLE_INFERENCE

    def __post_init__(self) -> None:
        if self.role not in ROLES or "/" in self.device:
            raise ValueError(f"program key: device {self.device!r}, role {self.role!r}")

    def __str__(self) -> str:
        return self.device if self.role == ROLE_INFERENCE else f"{self.device}/{self.role}"

    @classmethod
    def parse(cls, text: str) -> ProgramKey:
        device, _, role = text.partition("/")
        return cls(device, role or ROLE_INFERENCE)


@dataclass
class ExportedEntry:
    """What exporting one entry gives: its record, and per variant the program file of each
    device and role (``programs[i]["cpu"]``, keys :class:`ProgramKey`)."""

    package: str
    entry: Entry
    programs: list[dict[str, str]]
    #: "module:qualname (file:line)", for messages.
    where: str
    #: The compile backend of every program of the entry.
    backend: str = BACKEND_AOTI

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
            "backend": self.backend,
        }
        (folder / EXPORTED_NAME).write_text(json.dumps(body, indent=1, sort_keys=True), encoding="utf-8")

    @classmethod
    def read(cls, folder: Path) -> ExportedEntry:
        raw = _read_stamped(folder / EXPORTED_NAME)
        return cls(
            raw["package"], entry_from_json(raw["entry"]), raw["programs"], raw["where"], raw["backend"]
        )


@dataclass(frozen=True)
class Task:
    """Compile one program for one target."""

    program: str
    target: str
    backend: str
    #: The first entry needing it and its module (imported when loading the program needs
    #: operators the package registers).
    where: str = field(compare=False)
    module: str = field(compare=False)
    #: "module:qualname" and the variant's pinned sizes, for progress lines.
    label: str = field(compare=False, default="")


@dataclass
class Source:
    """What a compile is given: the program (FLAT rules) or, for CALL rules (compiled in the
    build process), the function with the variant's example arguments; see
    :class:`aot_build.backends.ProgramRequest` and :class:`aot_build.backends.FunctionRequest`."""

    program: torch.export.ExportedProgram | None = None
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
    backend: str
    backend_version: str

    @classmethod
    def of(cls, task: Task, built: Built, backend_version: str) -> Compiled:
        return cls(
            task.program,
            task.target,
            built.path.name,
            built.sha256,
            built.size,
            built.isa,
            task.backend,
            backend_version,
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
            size_one = ", ".join(f"{k}={v}" for k, v in variant.size_one.items())
            label = ex.key + (f" ({size_one})" if size_one else "")
            for t in targets:
                for program, role in roles(programs, t.device):
                    named = label if role == ROLE_INFERENCE else f"{label} {role}"
                    seen.setdefault(
                        (program, t.name, ex.backend),
                        Task(program, t.name, ex.backend, ex.where, module, named),
                    )
    return list(seen.values())


def roles(programs: dict[str, str], device: str) -> list[tuple[str, str]]:
    """(program, role) of one device in a variant's programs (keyed by :class:`ProgramKey`),
    in a fixed order."""
    out = []
    for text, program in sorted(programs.items()):
        key = ProgramKey.parse(text)
        if key.device == device:
            out.append((program, key.role))
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
    by_unit = {(c.program, c.target, c.backend): c for c in compiled}
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
                    c = by_unit[(program, t.name, ex.backend)]
                    m.files[c.file] = FileRecord(c.sha256, c.size)
                    artifacts.append(
                        Artifact(t.name, t.device, c.backend, c.file, c.isa, c.backend_version, role)
                    )
            variants.append(replace(variant, artifacts=tuple(artifacts)))
        m.entries[ex.key] = replace(ex.entry, variants=tuple(variants))
    for m in manifests.values():
        m.files = dict(sorted(m.files.items()))
    return manifests
