"""The export step of a build: each ``@aot_entry`` (found by the caller) traced with
torch.export for each device, checked, and turned into its manifest record and the programs the
build step compiles (:class:`.units.ExportedEntry`).

Used by the setuptools build's child process (:mod:`.driver`) and by the Bazel export action
(:mod:`.steps`); it discovers nothing itself.
"""

from __future__ import annotations

import gc
import os
import sys
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .. import backends, sdpa, trees
from ..decorate import AotEntry
from ..errors import AotBuildError, CompileError, compile_failure
from ..manifest import ROLE_BACKWARD, ROLE_FORWARD, ROLE_GRAD, ROLE_INFERENCE, Entry, TrainingRecord, Variant
from ..names import package_root
from .inputs import InputSet, input_sets, size_one_copies
from .joint import JointPrograms, export_joint
from .lifting import constant_tensors
from .shapes import Shapes, input_leaves, read_shapes
from .specs import dtype_name
from .trace import Traced, trace
from .units import ExportedEntry, ProgramKey, Source, program_bytes, program_name


def say(msg: str) -> None:
    print(f"aot-build: {msg}", flush=True)


def entry_where(entry: AotEntry, build_lib: Path) -> str:
    path = Path(entry.__wrapped__.__code__.co_filename)
    try:
        path = path.relative_to(build_lib)
    except ValueError:
        pass
    return f"{entry.key} ({path}:{entry.__wrapped__.__code__.co_firstlineno})"


def live_storages() -> set[int]:
    """Addresses of every tensor alive now. A constant the export finds at one of these was
    read from outside the function, not created by it."""
    from torch._subclasses.fake_tensor import FakeTensor

    found: set[int] = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for o in gc.get_objects():
            # type(), not isinstance(): isinstance consults __class__, which lazy proxies answer
            kind = type(o)
            if issubclass(kind, torch.Tensor) and not issubclass(kind, FakeTensor):
                try:
                    found.add(o.data_ptr())
                except RuntimeError:  # functional tensors left over from tracing
                    pass
    return found


def random_ops(ep: torch.export.ExportedProgram) -> list[str]:
    """The random operators the program calls (``aten.randn``, ``aten.dropout``...), sorted."""
    found = {
        str(n.target.overloadpacket)
        for n in ep.graph.nodes
        if n.op == "call_function"
        and isinstance(n.target, torch._ops.OpOverload)
        and torch.Tag.nondeterministic_seeded in n.target.tags
    }
    return sorted(found)


def mutated_inputs(traced: Traced) -> tuple[tuple[int, ...], list[str]]:
    """The tensors the exported program writes to in place: their indices among the tensors
    the library takes (argument tensors, then weights), and state it writes that is neither
    (by name; such a program is refused)."""
    from torch.export.graph_signature import InputKind, TensorArgument

    sig = traced.ep.graph_signature
    mutable = bool(sig.user_inputs_to_mutate or sig.buffers_to_mutate) or any(
        n.op == "call_function"
        and isinstance(n.target, torch._ops.OpOverload)
        and n.target._schema.is_mutable
        for n in traced.ep.graph.nodes
    )
    if not mutable:  # the common case: no in-place op at all, nothing to functionalize
        return (), []
    # export's IR keeps in-place ops; functionalizing (what AOTInductor does next) says
    # which inputs they write to, through views too.
    sig = traced.ep.run_decompositions({}).graph_signature
    targets = set(sig.user_inputs_to_mutate.values()) | set(sig.buffers_to_mutate.values())
    tensors = [
        spec.arg.name
        for spec in sig.input_specs
        if spec.kind == InputKind.USER_INPUT and isinstance(spec.arg, TensorArgument)
    ]
    indices = tuple(i for i, name in enumerate(tensors) if name in targets)
    return indices, sorted(targets - set(tensors))


def mutated_labels(traced: Traced, iset: InputSet, indices: tuple[int, ...]) -> list[str]:
    """``argument x``, ``weight BN.running_mean``: the written tensors, for messages."""
    labels = [f"argument {lb}" for lb in iset.tensor_labels()]
    labels += [f"weight {p[0].label()}" for p in traced.lifted.paths]
    return [labels[i] for i in indices]


class Exporter:
    """Exports entries for one build.

    Args:
        build_lib: folder holding the package's modules (paths in messages are relative to it).
        backend: compile backend of entries that name none.
        programs: where saved programs are written (content-named).
    """

    def __init__(self, build_lib: Path, backend: str, programs: Path) -> None:
        self.build_lib = build_lib
        self.backend = backend
        self.programs = programs
        #: Programs compiled in the build process instead of by the workers (torch.export
        #: could not save them, or a CALL backend compiles the function itself), by name.
        self.unsaved: dict[str, Source] = {}
        #: The notes printed so far: an entry's variants often earn the same one.
        self._noted: set[str] = set()

    def note(self, msg: str) -> None:
        """Print ``msg`` as a note, once per build."""
        if msg not in self._noted:
            self._noted.add(msg)
            say(f"note: {msg}")

    def export(self, entry: AotEntry, iset: InputSet, device: str, where: str) -> Traced:
        fn = entry.__wrapped__
        top = package_root(fn.__module__)
        live = live_storages()
        try:
            traced = trace(fn, iset, device, where)
        except CompileError:
            raise
        except Exception as exc:
            raise compile_failure(
                where,
                "torch.export failed",
                exc,
                "make the function traceable by torch.export (no data-dependent Python control "
                "flow, no unsupported calls), or fix example_inputs / dynamic_shapes as the "
                "message above suggests",
            ) from exc
        if entry.backward and torch.is_grad_enabled in traced.captured.answered:
            raise CompileError(
                f"{where}: backward=True, and the function reads torch.is_grad_enabled(), which the "
                "build answers False (it traces under torch.no_grad()): every training call (grad "
                "mode on) would run as Python.\n  decide by an argument instead of by grad mode, or "
                "drop backward=True"
            )
        if traced.captured.unchecked:
            self.note(
                f"{entry.key} asks torch.compiler.is_compiling(); state that only the function "
                "run as Python reads (where it is False) is checked on each call, except for: "
                + "; ".join(traced.captured.unchecked)
            )
        traced.mutated, other = mutated_inputs(traced)
        if other:
            raise CompileError(
                f"{where}: writes in place to {', '.join(other)}, which is neither an argument nor "
                "a weight read from package state; the caller could never see the new value.\n  "
                "pass the tensor as an argument, or hold it in a module global or on self"
            )
        if traced.mutated:
            self.note(
                f"{entry.key} updates in place: "
                f"{', '.join(mutated_labels(traced, iset, traced.mutated))} (written into the "
                "caller's tensors by the compiled library, as eager does)"
            )
        # This refusal and the one of writes to other state above are worded for the lifted
        # program, but hold for every backend: a CALL backend compiles the function itself,
        # yet the call's guards and state record come from this torch.export trace, which
        # is why every entry is exported whatever its backend.
        consts = constant_tensors(traced.ep)
        outside = [k for k, t in consts.items() if t.numel() and t.data_ptr() in live]
        if outside:
            listing = ", ".join(
                f"{tuple(consts[k].shape)} {dtype_name(consts[k].dtype)}" for k in outside[:8]
            )
            more = f" and {len(outside) - 8} more" if len(outside) > 8 else ""
            raise CompileError(
                f"{where}: reads {len(outside)} tensor(s) that exist outside the function ({listing}"
                f"{more}) by a route the guard trace did not see (torch.export read them, Dynamo did "
                "not). The compiled artifact would hold their build-time values, and later "
                "changes would silently be ignored.\n  "
                f"reach each such tensor from a module global of {top!r} (directly, or as an "
                "attribute of a module or object held there), or pass it to the function as an argument"
            )
        embedded: list[dict[str, Any]] = [
            {
                "name": k,
                "shape": list(t.shape),
                "dtype": dtype_name(t.dtype),
                "bytes": t.numel() * t.element_size(),
            }
            for k, t in consts.items()
        ]
        if embedded:
            listing = ", ".join(f"{c['name']} {c['shape']} {c['dtype']}" for c in embedded)
            self.note(
                f"{entry.key} embeds {len(embedded)} tensor constant(s), "
                f"{sum(int(c['bytes']) for c in embedded)} bytes ({listing}), created inside the "
                "function (e.g. torch.tensor literals), so baked into the artifact"
            )
        traced.embedded = embedded
        traced.sdpa = sdpa.compiled_flags(traced.ep.graph_module, where)
        random = random_ops(traced.ep)
        if random:
            self.note(
                f"{entry.key} draws random numbers ({', '.join(random)}): its compiled calls "
                "draw another stream than eager Python under the same seed (as torch.compile's do)"
            )
        return traced

    @staticmethod
    def joint(ep: torch.export.ExportedProgram, where: str, mutated: tuple[int, ...] = ()) -> JointPrograms:
        """The forward and backward programs of a training entry's variant; every floating
        input (argument or weight) gets its gradient computed, but those updated in place
        (``mutated``: running statistics, caches), which take none."""
        flags = [
            isinstance(v, torch.Tensor) and v.dtype.is_floating_point and i not in mutated
            for i, v in enumerate(n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder")
        ]
        try:
            return export_joint(ep, flags)
        except CompileError as exc:
            raise CompileError(f"{where}: backward=True: {exc}") from exc
        except Exception as exc:
            raise compile_failure(
                where,
                "splitting the training graph into forward and backward failed",
                exc,
                "make the function differentiable without in-place updates or random ops, or "
                "drop backward=True",
            ) from exc

    def call_programs(self, entry: AotEntry, iset: InputSet, device: str) -> dict[str, str]:
        """A CALL backend compiles the function itself, in this process: one unit per role,
        for inference (under no_grad) and, with backward=True, for calls with grad enabled
        (role ``grad``)."""
        args = ((iset.self_obj,) if entry.is_method else ()) + tuple(iset.args)
        spec = iset.export_spec()
        spec = (None, *spec) if entry.is_method else spec
        out = {}
        roles = (ROLE_INFERENCE, ROLE_GRAD) if entry.backward else (ROLE_INFERENCE,)
        for role in roles:
            name = f"call-{len(self.unsaved)}"
            self.unsaved[name] = Source(None, entry.__wrapped__, args, spec, role == ROLE_GRAD)
            out[str(ProgramKey(device, role))] = name
        return out

    def save_program(self, ep: torch.export.ExportedProgram, where: str) -> str:
        """Save ``ep`` for the compile workers; its file name (content-named). A program
        torch.export cannot save is compiled in this process instead (with a note)."""
        try:
            data = program_bytes(ep)
        except Exception as exc:
            name = f"unsaved-{len(self.unsaved)}"
            self.unsaved[name] = Source(ep)
            say(
                f"note: {where}: compiled in the build process, not cached ({type(exc).__name__} "
                f"while saving the program: {exc})"
            )
            return name
        name = program_name(data)
        path = self.programs / name
        if not path.exists():
            path.write_bytes(data)
        return name

    def variant(
        self, entry: AotEntry, iset: InputSet, devices: list[str], where: str, backend: backends.Backend
    ) -> tuple[Variant, dict[str, str], Shapes]:
        """Export one input set for each device; the variant's record (artifacts come from
        the compile step) and its programs: per device (``cpu``) and, for a training entry,
        per device and role (:class:`.units.ProgramKey`)."""
        here = where + (
            f" [{', '.join(f'{k}={v}' for k, v in iset.size_one.items())}]" if iset.size_one else ""
        )
        exported: dict[str, Traced] = {d: self.export(entry, iset, d, here) for d in devices}
        programs: dict[str, str] = {}
        training: TrainingRecord | None = None
        for d, t in exported.items():
            if backend.convention == backends.CALL:
                programs.update(self.call_programs(entry, iset, d))
                continue
            programs[str(ProgramKey(d))] = self.save_program(t.ep, here)
            if entry.backward:
                joint = self.joint(t.ep, here, t.mutated)
                programs[str(ProgramKey(d, ROLE_FORWARD))] = self.save_program(joint.forward, here)
                programs[str(ProgramKey(d, ROLE_BACKWARD))] = self.save_program(joint.backward, here)
                training = joint.record
        traced = exported.get("cpu") or next(iter(exported.values()))
        shapes = read_shapes(traced.ep, iset)
        arg_leaves, in_spec = pytree.tree_flatten(iset.args)
        leaves = input_leaves(arg_leaves, shapes, iset, here)
        state = traced.state_tree()
        variant = Variant(
            inputs=trees.encode(in_spec, "arguments"),
            leaves=leaves,
            outputs=traced.outputs.tree,
            out_leaves=tuple(traced.outputs.leaves),
            symbols=shapes.symbols(),
            state=state,
            embedded_constants=tuple(traced.embedded),
            artifacts=(),
            input_set=iset.index,
            size_one=dict(iset.size_one),
            labels=tuple(iset.labels),
            training=training,
            mutated=traced.mutated,
            sdpa=next((t.sdpa for t in exported.values() if t.sdpa), {}),
        )
        say(f"{entry.key} ({variant.signature()}): {state.summary()}")
        return variant, programs, shapes

    def backend_of(self, entry: AotEntry, where: str) -> str:
        """The entry's compile backend (its own, else the project's), checked to be installed."""
        name = entry.backend or self.backend
        try:
            backends.find(name)
        except (backends.UnknownBackend, TypeError) as exc:
            given = (
                f'@aot_entry(backend="{name}")' if entry.backend else f'[tool.aot-build] backend = "{name}"'
            )
            raise CompileError(f"{where}: {given}: {exc}") from exc
        return name

    @staticmethod
    def check_capabilities(entry: AotEntry, name: str, devices: list[str], where: str) -> None:
        """Refuse what backend ``name`` does not build: another device's targets, a training
        entry."""
        caps = backends.capabilities(backends.find(name))
        other = [d for d in devices if d not in caps.devices]
        if other:
            raise CompileError(
                f"{where}: the {name} backend builds {', '.join(sorted(caps.devices))} targets only, "
                f"not {', '.join(other)} ones.\n  build this entry with a backend that does "
                f'(@aot_entry(backend="...")), or drop the {", ".join(other)} targets'
            )
        if entry.backward and caps.training == backends.TRAINING_NONE:
            raise CompileError(
                f"{where}: backward=True: the {name} backend builds no training entries.\n  build "
                'this entry with a backend that does (@aot_entry(backend="...")), or drop backward=True'
            )

    def export_entry(self, entry: AotEntry, devices: list[str]) -> ExportedEntry:
        """Export every input set of ``entry`` (and the size-one variants they need) for ``devices``."""
        where = entry_where(entry, self.build_lib)
        name = self.backend_of(entry, where)
        self.check_capabilities(entry, name, devices, where)
        try:
            sets = input_sets(entry, where)
        except AotBuildError as exc:
            text = str(exc).replace(f"{self.build_lib}{os.sep}", "")
            named = text.startswith((where, entry.key))  # already names the entry
            raise CompileError(text if named else f"{where}: {text}") from exc
        top = package_root(entry.__wrapped__.__module__)
        if not hasattr(sys.modules.get(top), "__path__"):
            raise CompileError(
                f"{where}: the entry is in the module {top!r}, not in a package; "
                "aot_build ships artifacts inside a package folder. Move the module into a "
                "package (a folder with __init__.py)"
            )
        variants: list[Variant] = []
        programs: list[dict[str, str]] = []
        found = backends.find(name)
        for iset in sets:
            generic, progs, shapes = self.variant(entry, iset, devices, where, found)
            variants.append(generic)
            programs.append(progs)
            ones = shapes.size_one_symbols()
            if ones:
                try:
                    copies = size_one_copies(iset, shapes.exprs, ones, shapes.names)
                except AotBuildError as exc:
                    raise CompileError(f"{where}: {exc}") from exc
                for copy in copies:
                    v, progs, _ = self.variant(entry, copy, devices, where, found)
                    variants.append(v)
                    programs.append(progs)
        record = Entry(
            entry.__wrapped__.__module__,
            entry.__wrapped__.__qualname__,
            where.split("(")[-1].rstrip(")"),
            tuple(variants),
            method=entry.is_method,
        )
        return ExportedEntry(top, record, programs, where, name)
