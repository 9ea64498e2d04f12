"""Compile all entries of a build for all targets, into a staging folder.

Runs in a child process of the setuptools build, so the user's modules are imported into a
fresh interpreter and nothing of the build's own process is touched. It writes only into the
staging folder it is given; the setuptools command moves the result into place once every
entry has compiled, so a failed build leaves no half-written output.
"""

from __future__ import annotations

import gc
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .. import __version__, rules, trees
from ..constants import ARTIFACT_DIR, ENV_CROSS_TORCH, MANIFEST_NAME, RULE_AOTI
from ..decorate import AotEntry
from ..discover import discover_entries
from ..errors import AotBuildError, CompileError, compile_failure
from ..guards import native
from ..manifest import Entry, Manifest, Variant
from ..names import package_root
from ..rules import Built
from ..targets import Target, cuda_build_problem, expand_aliases, machine, parse_target
from . import reuse
from .cache import BuildCache
from .inputs import InputSet, input_sets, pinned_copies
from .joint import JointPrograms, export_joint
from .lifting import constant_tensors
from .pool import Options, compile_program, describe_failure, run_tasks
from .shapes import Shapes, input_leaves, read_shapes
from .specs import dtype_name
from .toolchain import FloorError, binutil, build_floor, floor_args, headers_in, real_compiler
from .trace import Traced, trace
from .units import Compiled, ExportedEntry, Source, Task, assemble, program_bytes, program_name, tasks_of


@dataclass
class Job:
    """What the setuptools command asks of the child process (read from CONFIG.json).

    Args:
        build_lib: folder holding the package's modules as they will be installed.
        packages: dotted names of the distribution's packages.
        modules: modules to import to find entries.
        targets: target names to compile for.
        optional_targets: targets that may be skipped when this machine cannot build them.
        inductor_options: extra Inductor config.
        strip: strip shipped libraries.
        out_dir: staging folder; receives ``<package root path>/_aot_build/...``.
        cache_dir: build cache folder ("" : no cache), see :mod:`.cache`.
        cache_max_bytes: the cache's size limit.
        jobs: compile worker processes (0: one per core).
        progress: one line per compiled program and target.
        rule: compile rule of entries that name none.
    """

    build_lib: str
    packages: list[str]
    modules: list[str]
    targets: list[str]
    optional_targets: list[str] = field(default_factory=list)
    inductor_options: dict[str, Any] = field(default_factory=dict)
    strip: bool = True
    out_dir: str = ""
    cache_dir: str = ""
    cache_max_bytes: int = 5 * 10**9
    jobs: int = 0
    progress: bool = True
    rule: str = RULE_AOTI


def say(msg: str) -> None:
    print(f"aot-build: {msg}", flush=True)


def _where(entry: AotEntry, build_lib: Path) -> str:
    path = Path(entry.__wrapped__.__code__.co_filename)
    try:
        path = path.relative_to(build_lib)
    except ValueError:
        pass
    return f"{entry.key} ({path}:{entry.__wrapped__.__code__.co_firstlineno})"


def _live_storages() -> set[int]:
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


def parse_targets(names: list[str], what: str) -> list[Target]:
    """``names`` as targets; CompileError naming ``what`` gave them."""
    try:
        return [parse_target(n) for n in names]
    except ValueError as exc:
        raise CompileError(f"{what}: {exc}") from exc


def manifest_header(skipped: list[dict[str, str]]) -> Manifest:
    """The build-wide fields every manifest of a build made by this process carries."""
    return Manifest(
        package="",
        aot_build_version=__version__,
        torch_version=torch.__version__,
        python_version=f"{sys.version_info[0]}.{sys.version_info[1]}",
        machine=machine(),
        default_dtype=dtype_name(torch.get_default_dtype()),
        skipped_targets=skipped,
    )


def _artifact_folder(staging: Path, package: str) -> Path:
    """``<staging>/<package path>/_aot_build``: where a package root's artifacts are written."""
    return staging.joinpath(*package.split(".")) / ARTIFACT_DIR


def evaluator_unit(out_dir: Path) -> Built:
    """The guard evaluator every package of the build ships (:mod:`aot_build.guards.native`),
    held to the build's manylinux floor; in a cross build, compiled by the target's C compiler
    (``CC``, else the C compiler beside ``CXX``: ``aarch64-linux-gnu-gcc``)."""
    try:
        cc = native.c_compiler()
        if os.environ.get(ENV_CROSS_TORCH, "").strip():
            cxx = real_compiler()
            beside = cxx[: -len("g++")] + "gcc" if cxx.endswith("g++") else ""
            cc = shlex.split(os.environ["CC"]) if os.environ.get("CC") else [beside or cxx]
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            floor = floor_args(build_floor(), cc[0], Path(tmp))
            strip = binutil(cc[0], "strip")
            return native.build_unit(
                out_dir, cc=cc, compile_args=floor.compile, link_args=floor.link, strip=strip
            )
    except (native.EvaluatorBuildError, FloorError) as exc:
        raise CompileError(str(exc)) from exc


def check_toolchain(strip: bool) -> None:
    """Fail before any export when the C++ compiler AOTInductor uses is missing (every entry
    would fail the same way, minutes later); note a missing ``strip``."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    try:
        get_cpp_compiler()
    except Exception as exc:
        raise CompileError(
            f"no working C++ compiler on the build machine ({type(exc).__name__}: {exc}). "
            "AOTInductor compiles every artifact with one (the wheel's users need none).\n  install "
            "g++ (apt-get install g++, dnf install gcc-c++) or point CXX at a compiler"
        ) from exc
    if strip and not shutil.which("strip"):
        say(
            "note: strip = true, but there is no 'strip' on PATH (binutils): the libraries ship "
            "with their symbol tables, about 5x larger. Install binutils, or set strip = false"
        )


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


class _Compiler:
    def __init__(self, job: Job, record: str | None = None) -> None:
        self.job = job
        #: The key to record a successful build under (reuse.py); None: not recorded.
        self.record = record
        self.build_lib = Path(job.build_lib)
        self.targets = parse_targets(expand_aliases(job.targets), "[tool.aot-build] targets")
        self.skipped: list[dict[str, str]] = []
        self.cache = BuildCache(Path(job.cache_dir) if job.cache_dir else None, job.cache_max_bytes)
        self.hits = self.misses = 0
        #: Where saved programs go (content-named); programs compiled in this process instead
        #: (torch.export could not save them, or a CALL rule compiles the function itself).
        self.programs = Path()
        self.unsaved: dict[str, Source] = {}

    def usable_targets(self) -> list[Target]:
        usable = []
        for t in self.targets:
            reason = cuda_build_problem(t) if t.device == "cuda" else None
            if reason:
                if t.name not in self.job.optional_targets:
                    raise CompileError(
                        f"target {t.name}: {reason}. Or mark it optional: "
                        f'[tool.aot-build] optional-targets = ["{t.name}"]'
                    )
                say(f"skipping optional target {t.name}: {reason}")
                self.skipped.append({"target": t.name, "reason": reason})
                continue
            usable.append(t)
        return usable

    def export(self, entry: AotEntry, iset: InputSet, device: str, where: str) -> Traced:
        fn = entry.__wrapped__
        top = package_root(fn.__module__)
        live = _live_storages()
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
        traced.mutated, other = mutated_inputs(traced)
        if other:
            raise CompileError(
                f"{where}: writes in place to {', '.join(other)}, which is neither an argument nor "
                "a weight read from package state; the caller could never see the new value.\n  "
                "pass the tensor as an argument, or hold it in a module global or on self"
            )
        if traced.mutated:
            say(
                f"note: {entry.key} updates in place: "
                f"{', '.join(mutated_labels(traced, iset, traced.mutated))} (written into the "
                "caller's tensors by the compiled library, as eager does)"
            )
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
                "not). AOTInductor would bake their build-time values into the artifact, and later "
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
            say(
                f"note: {entry.key} embeds {len(embedded)} tensor constant(s), "
                f"{sum(int(c['bytes']) for c in embedded)} bytes ({listing}), created inside the "
                "function (e.g. torch.tensor literals), so baked into the artifact"
            )
        traced.embedded = embedded
        random = random_ops(traced.ep)
        if random:
            say(
                f"note: {entry.key} draws random numbers ({', '.join(random)}): its compiled calls "
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

    def call_programs(
        self, entry: AotEntry, iset: InputSet, device: str, ep: torch.export.ExportedProgram
    ) -> dict[str, str]:
        """A CALL rule compiles the function itself, in this process: one unit per role, for
        inference (under no_grad) and, with backward=True, for calls with grad enabled."""
        args = ((iset.self_obj,) if entry.is_method else ()) + tuple(iset.args)
        spec = iset.export_spec()
        spec = (None, *spec) if entry.is_method else spec
        out = {}
        for role, grad in (("", False), ("/forward", True)) if entry.backward else (("", False),):
            name = f"call-{len(self.unsaved)}"
            self.unsaved[name] = Source(ep, entry.__wrapped__, args, spec, grad)
            out[device + role] = name
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
        self, entry: AotEntry, iset: InputSet, devices: list[str], where: str, rule: rules.Rule
    ) -> tuple[Variant, dict[str, str], Shapes]:
        """Export one input set for each device; the variant's record (artifacts come from
        the compile step) and its programs: per device (``cpu``) and, for a training entry,
        per device and role (``cpu/forward``, ``cpu/backward``)."""
        here = where + (f" [{', '.join(f'{k}={v}' for k, v in iset.pinned.items())}]" if iset.pinned else "")
        exported: dict[str, Traced] = {d: self.export(entry, iset, d, here) for d in devices}
        programs: dict[str, str] = {}
        training: dict[str, Any] = {}
        for d, t in exported.items():
            if rule.convention == rules.CALL:
                programs.update(self.call_programs(entry, iset, d, t.ep))
                continue
            programs[d] = self.save_program(t.ep, here)
            if entry.backward:
                joint = self.joint(t.ep, here, t.mutated)
                programs[f"{d}/forward"] = self.save_program(joint.forward, here)
                programs[f"{d}/backward"] = self.save_program(joint.backward, here)
                training = joint.meta
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
            pinned=dict(iset.pinned),
            labels=tuple(iset.labels),
            training=training,
            mutated=traced.mutated,
        )
        say(f"{entry.key} ({variant.signature()}): {state.summary()}")
        return variant, programs, shapes

    def rule_of(self, entry: AotEntry, where: str) -> str:
        """The entry's compile rule (its own, else the project's), checked to be installed."""
        name = entry.rule or self.job.rule
        try:
            rules.find(name)
        except (rules.UnknownRule, TypeError) as exc:
            given = f'@aot_entry(rule="{name}")' if entry.rule else f'[tool.aot-build] rule = "{name}"'
            raise CompileError(f"{where}: {given}: {exc}") from exc
        return name

    def export_entry(self, entry: AotEntry, devices: list[str]) -> ExportedEntry:
        """Export every input set of ``entry`` (and the size-1 copies they need) for ``devices``."""
        where = _where(entry, self.build_lib)
        rule = self.rule_of(entry, where)
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
        found = rules.find(rule)
        for iset in sets:
            generic, progs, shapes = self.variant(entry, iset, devices, where, found)
            variants.append(generic)
            programs.append(progs)
            ones = shapes.ones()
            if ones:
                try:
                    copies = pinned_copies(iset, shapes.exprs, ones, shapes.names)
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
        return ExportedEntry(top, record, programs, where, rule)

    def header(self) -> Manifest:
        return manifest_header(self.skipped)

    def compile_all(self, tasks: list[Task], out_dir: Path, work: Path) -> list[Compiled]:
        """Every task: from the build cache, or compiled by the workers; one line each."""
        total = len(tasks)
        count = 0
        keys: dict[Task, str] = {}
        compiled: list[Compiled] = []

        def line(task: Task, c: Compiled, seconds: float, how: str) -> None:
            nonlocal count
            count += 1
            if self.job.progress:
                say(
                    f"[{count}/{total}] {task.label} [{task.target}] {how} in "
                    f"{seconds:.1f} s, {c.size / 1e6:.2f} MB, ISA {c.isa or '-'}"
                )

        todo: list[Task] = []
        for task in tasks:
            if self.cache.root is None or task.program in self.unsaved:
                todo.append(task)
                continue
            t0 = time.perf_counter()
            data = (self.programs / task.program).read_bytes()
            rule = rules.find(task.rule)
            key = keys[task] = self.cache.key(
                data,
                parse_target(task.target),
                self.job.inductor_options,
                self.job.strip,
                (rule.name, rule.version),
            )
            hit = self.cache.get(key, out_dir)
            if hit is None:
                todo.append(task)
                continue
            c = Compiled.of(task, hit, rule.version)
            compiled.append(c)
            self.hits += 1
            line(task, c, time.perf_counter() - t0, "from the build cache")

        def done(task: Task, c: Compiled, seconds: float) -> None:
            self.misses += 1
            if task in keys:
                self.cache.put(keys[task], Built(out_dir / c.file, c.sha256, c.size, c.isa))
            line(task, c, seconds, "compiled")

        opts = Options(
            programs_dir=str(self.programs),
            out_dir=str(out_dir),
            inductor_options=self.job.inductor_options,
            strip=self.job.strip,
            build_lib=str(self.build_lib),
        )
        pooled = [t for t in todo if t.program not in self.unsaved]
        jobs = self.job.jobs or os.cpu_count() or 1
        if pooled:
            say(f"compiling {len(pooled)} program(s) in {min(jobs, len(pooled))} worker process(es)")
        compiled += run_tasks(pooled, opts, jobs, work, done)
        here = [t for t in todo if t.program in self.unsaved]
        if not here:
            return compiled
        with headers_in(str(work)):
            for task in here:
                t0 = time.perf_counter()
                try:
                    c = compile_program(task, self.unsaved[task.program], opts)
                except Exception as exc:
                    raise describe_failure(task, exc) from exc
                compiled.append(c)
                done(task, c, time.perf_counter() - t0)
        return compiled

    def run(self) -> int:
        staging = Path(self.job.out_dir)
        sys.path.insert(0, str(self.build_lib))
        entries = discover_entries(self.job.modules, self.job.packages, self.build_lib)
        if not entries:
            say(f"no @aot_entry functions found in {len(self.job.modules)} modules; the wheel ships none")
            return 0
        targets = self.usable_targets()
        if targets:
            check_toolchain(self.job.strip)
        devices = sorted({t.device for t in targets})
        say(f"exporting {len(entries)} entries for {', '.join(t.name for t in targets) or 'no targets'}")
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="aot-build-work-") as tmp:
            work = Path(tmp)
            self.programs = work / "programs"
            self.programs.mkdir()
            exported: list[ExportedEntry] = []
            failed: list[str] = []
            tops: set[str] = set()
            for entry in entries:
                tops.add(package_root(entry.__wrapped__.__module__))
                if not targets:  # every target was optional and skipped: the manifest says why
                    continue
                try:
                    exported.append(self.export_entry(entry, devices))
                except CompileError as exc:
                    failed.append(_where(entry, self.build_lib))
                    print(f"\naot-build: error: {exc}\n", file=sys.stderr, flush=True)
            if failed:
                raise CompileError(
                    f"{len(failed)} of {len(entries)} entries failed to compile (each error is "
                    "above); no artifacts were written:\n  " + "\n  ".join(failed)
                )
            libs = work / "libs"
            libs.mkdir()
            compiled = self.compile_all(tasks_of(exported, targets), libs, work)
            evaluator = evaluator_unit(libs) if exported else None
            manifests = assemble(exported, compiled, targets, self.header(), evaluator)
            for top in sorted(tops - set(manifests)):
                manifests[top] = replace(self.header(), package=top)
            total = 0
            lines: list[str] = []
            for top, manifest in sorted(manifests.items()):
                folder = _artifact_folder(staging, top)
                folder.mkdir(parents=True, exist_ok=True)
                for name in manifest.files:
                    shutil.copyfile(libs / name, folder / name)
                manifest.write(folder / MANIFEST_NAME)
                size, line = self.report(manifest)
                total += size
                lines.append(line)
        if self.record and not self.unsaved and not self.skipped:
            reuse.save(
                asdict(self.job), os.environ, self.record, reuse.imported_files(), len(compiled), total, lines
            )
        cached = (
            f"; build cache {self.cache.root}: {self.hits} hit(s), {self.misses} compiled"
            if self.cache.root is not None
            else "; build cache off"
        )
        say(
            f"done in {time.perf_counter() - t0:.1f} s; artifacts add {total / 1e6:.2f} MB to the wheel"
            + cached
        )
        return 0

    @staticmethod
    def report(manifest: Manifest) -> tuple[int, str]:
        """Say what one package ships; its size in bytes and the line said."""
        size = sum(f.size for f in manifest.files.values())
        per_target: dict[str, int] = {}
        seen: set[str] = set()
        for e in manifest.entries.values():
            for v in e.variants:
                for a in v.artifacts:
                    if a.file not in seen:
                        seen.add(a.file)
                        per_target[a.target] = per_target.get(a.target, 0) + manifest.files[a.file].size
        detail = ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in per_target.items())
        line = (
            f"package {manifest.package}: {len(manifest.entries)} entries, {len(manifest.files)} files, "
            f"{size / 1e6:.2f} MB ({detail})"
        )
        say(line)
        return size, line


def main(argv: list[str] | None = None, record: str | None = None) -> int:
    """The build's child process; ``record``: the key to record a successful build under."""
    argv = sys.argv[1:] if argv is None else argv
    # torch's own deprecation chatter while pickling tree specs; it says nothing to users.
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
    if len(argv) != 1:
        print("usage: python -m aot_build.compile CONFIG.json", file=sys.stderr)
        return 2
    job = Job(**json.loads(Path(argv[0]).read_text()))
    try:
        return _Compiler(job, record).run()
    except AotBuildError as exc:
        print(f"\naot-build: error: {exc}", file=sys.stderr, flush=True)
        return 1
