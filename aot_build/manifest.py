"""The manifest: what a wheel holds for each entry, written by the build and read by the shim.

Layout (JSON, one per top-level package, at ``<package>/_aot_build/manifest.json``)::

    format, format_version          stamp; readers refuse others
    package, aot_build_version, torch_version, python_version, machine
    entries: {"pkg.mod:func": Entry}
    skipped_targets: [{"target", "reason"}]
    files: {"<sha256>.so": {"sha256", "size"}}   every artifact, stored once by content

An entry has variants (one per example-input set), a variant has artifacts (one per target).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .constants import MANIFEST_FORMAT, MANIFEST_VERSION
from .errors import ManifestError


@dataclass
class TensorSpec:
    """Static description of one tensor.

    Args:
        shape: exact sizes.
        dtype: torch dtype name without the ``torch.`` prefix, e.g. ``float32``.
        device: device type, e.g. ``cpu`` or ``cuda``.
        stride: exact strides; compiled code indexes memory with them.
    """

    shape: tuple[int, ...]
    dtype: str
    device: str
    stride: tuple[int, ...]


@dataclass
class Leaf:
    """One flattened argument: a tensor (``tensor`` set) or a plain value baked into the
    artifact (``value``), which later calls must repeat exactly."""

    tensor: TensorSpec | None = None
    value: Any = None


@dataclass
class WeightBinding:
    """A tensor the entry reads from a module global, lifted to an input of the artifact so
    every call computes with its current value.

    Args:
        module: the module whose global it is, e.g. ``example_pkg.blocks``.
        name: the global's name in that module.
        path: dotted path below the global (``"0.weight"`` for a parameter of an
            ``nn.Module`` global); empty when the global is itself the tensor.
        spec: shape, dtype and device it had at build time; calls need the same.
    """

    module: str
    name: str
    path: str
    spec: TensorSpec


@dataclass
class ModuleState:
    """An ``nn.Module`` global whose ``training`` flag was traced into the artifact."""

    module: str
    name: str
    training: bool


@dataclass
class Artifact:
    """One compiled file for one target.

    Args:
        target: target name, e.g. ``cpu-avx2``.
        device: device type of the tensors it takes.
        rule: compile rule that made it (``aoti``).
        file: file name inside the artifact folder (content-addressed).
        isa: what the compiler reports about the code (e.g. ``AVX2``), for ``inspect``.
    """

    target: str
    device: str
    rule: str
    file: str
    isa: str = ""


@dataclass
class Variant:
    """Compiled forms of an entry for one set of example inputs."""

    in_tree: str
    leaves: tuple[Leaf, ...]
    out_tree: str
    weights: tuple[WeightBinding, ...] = ()
    modules: tuple[ModuleState, ...] = ()
    embedded_constants: tuple[dict[str, Any], ...] = ()
    artifacts: tuple[Artifact, ...] = ()


@dataclass
class Entry:
    """One ``@aot_entry`` function. ``source`` is ``path/to/mod.py:LINE`` for messages."""

    module: str
    qualname: str
    source: str
    variants: tuple[Variant, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.module}:{self.qualname}"


@dataclass
class FileRecord:
    sha256: str
    size: int


@dataclass
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

    def to_json(self) -> str:
        body = {"format": MANIFEST_FORMAT, "format_version": MANIFEST_VERSION}
        body.update(dataclasses.asdict(self))
        return json.dumps(body, indent=1, sort_keys=True) + "\n"

    def write(self, path: Path) -> None:
        """Write atomically: a reader never sees half a manifest."""
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(self.to_json(), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def read(cls, path: Path) -> Manifest:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ManifestError(f"{path}: cannot read manifest: {exc}") from exc
        return cls.from_dict(raw, str(path))

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> Manifest:
        if not isinstance(raw, dict) or raw.get("format") != MANIFEST_FORMAT:
            raise ManifestError(f"{where}: not an aot_build manifest (no format stamp)")
        version = raw.get("format_version")
        if version != MANIFEST_VERSION:
            raise ManifestError(
                f"{where}: manifest format_version {version!r}, this aot_build reads "
                f"{MANIFEST_VERSION}; install the aot-build release that built this wheel"
            )
        try:
            return cls(
                package=raw["package"],
                aot_build_version=raw["aot_build_version"],
                torch_version=raw["torch_version"],
                python_version=raw["python_version"],
                machine=raw["machine"],
                entries={k: _entry(v) for k, v in raw["entries"].items()},
                skipped_targets=list(raw.get("skipped_targets", [])),
                files={k: FileRecord(**v) for k, v in raw["files"].items()},
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ManifestError(f"{where}: damaged manifest ({type(exc).__name__}: {exc})") from exc


def _spec(raw: dict[str, Any]) -> TensorSpec:
    return TensorSpec(tuple(raw["shape"]), raw["dtype"], raw["device"], tuple(raw["stride"]))


def _leaf(raw: dict[str, Any]) -> Leaf:
    return Leaf(_spec(raw["tensor"]) if raw["tensor"] is not None else None, raw["value"])


def _variant(raw: dict[str, Any]) -> Variant:
    return Variant(
        in_tree=raw["in_tree"],
        leaves=tuple(_leaf(x) for x in raw["leaves"]),
        out_tree=raw["out_tree"],
        weights=tuple(
            WeightBinding(w["module"], w["name"], w["path"], _spec(w["spec"])) for w in raw["weights"]
        ),
        modules=tuple(ModuleState(**m) for m in raw["modules"]),
        embedded_constants=tuple(raw["embedded_constants"]),
        artifacts=tuple(Artifact(**a) for a in raw["artifacts"]),
    )


def _entry(raw: dict[str, Any]) -> Entry:
    return Entry(
        module=raw["module"],
        qualname=raw["qualname"],
        source=raw["source"],
        variants=tuple(_variant(v) for v in raw["variants"]),
    )
