"""Compile all entries of a build for all targets, into a staging folder.

Runs in a child process of the setuptools build, so the user's modules are imported into a
fresh interpreter and nothing of the build's own process is touched. It writes only into the
staging folder it is given; the setuptools command moves the result into place once every
entry has compiled, so a failed build leaves no half-written output.
"""

from __future__ import annotations

import gc
import json
import sys
import time
import traceback
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from .. import __version__
from ..constants import ARTIFACT_DIR, MANIFEST_NAME, RULE_AOTI
from ..decorate import AotEntry
from ..discover import discover_entries
from ..errors import AotBuildError, CompileError
from ..manifest import Artifact, Entry, FileRecord, Manifest, Variant
from ..targets import Target, machine, parse_target
from . import aoti
from .lifting import Lifted, lift_referenced, package_tensor_index
from .specs import dtype_name, leaf


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
        out_dir: staging folder; receives ``<top package>/_aot_build/...``.
    """

    build_lib: str
    packages: list[str]
    modules: list[str]
    targets: list[str]
    optional_targets: list[str] = field(default_factory=list)
    inductor_options: dict[str, Any] = field(default_factory=dict)
    strip: bool = True
    out_dir: str = ""


def say(msg: str) -> None:
    print(f"aot-build: {msg}", flush=True)


def _where(entry: AotEntry, build_lib: Path) -> str:
    path = Path(entry.__wrapped__.__code__.co_filename)
    try:
        path = path.relative_to(build_lib)
    except ValueError:
        pass
    return f"{entry.key} ({path}:{entry.__wrapped__.__code__.co_firstlineno})"


def _fail(where: str, what: str, exc: BaseException, fix: str) -> CompileError:
    trace = "".join(traceback.format_exception(exc))
    first = (str(exc).strip().splitlines() or [""])[0]
    return CompileError(f"{trace}\n{where}: {what}: {type(exc).__name__}: {first}\n  {fix}")


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


def _to(device: str, value: Any) -> Any:
    return pytree.tree_map(lambda v: v.to(device) if isinstance(v, torch.Tensor) else v, value)


class _Compiler:
    def __init__(self, job: Job) -> None:
        self.job = job
        self.build_lib = Path(job.build_lib)
        self.targets: list[Target] = []
        for name in job.targets:
            try:
                self.targets.append(parse_target(name))
            except ValueError as exc:
                raise CompileError(f"[tool.aot-build] targets: {exc}") from exc
        self.manifests: dict[str, Manifest] = {}
        self.skipped: list[dict[str, str]] = []

    def manifest(self, top: str) -> Manifest:
        if top not in self.manifests:
            self.manifests[top] = Manifest(
                package=top,
                aot_build_version=__version__,
                torch_version=torch.__version__,
                python_version=f"{sys.version_info[0]}.{sys.version_info[1]}",
                machine=machine(),
                skipped_targets=self.skipped,
            )
        return self.manifests[top]

    def usable_targets(self) -> list[Target]:
        usable = []
        for t in self.targets:
            if t.device == "cuda" and not torch.cuda.is_available():
                reason = "no CUDA device on the build machine"
                if t.name not in self.job.optional_targets:
                    raise CompileError(
                        f"target {t.name}: {reason}. Build on a machine with a GPU, or mark it "
                        f'optional: [tool.aot-build] optional-targets = ["{t.name}"]'
                    )
                say(f"skipping optional target {t.name}: {reason}")
                self.skipped.append({"target": t.name, "reason": reason})
                continue
            usable.append(t)
        return usable

    def export(
        self, entry: AotEntry, where: str, args: tuple[Any, ...], device: str
    ) -> tuple[Any, Lifted, list[dict[str, Any]]]:
        fn = entry.__wrapped__
        assert isinstance(fn, types.FunctionType)
        top = fn.__module__.split(".")[0]
        lifted = Lifted()
        lift_referenced(fn, top, lifted)
        fix = (
            "make the function traceable by torch.export (no data-dependent Python control "
            "flow, no unsupported calls), or fix example_inputs so the function runs on them"
        )
        index = None
        live = _live_storages()
        for _ in range(2):
            dev_args = _to(device, args)
            saved = lifted.tensors
            lifted.tensors = [t.to(device) for t in saved]
            try:
                ep = aoti.export(fn, dev_args, lifted)
            except Exception as exc:
                raise _fail(where, "torch.export failed", exc, fix) from exc
            finally:
                lifted.tensors = saved
            consts = aoti.constant_tensors(ep)
            if not consts:
                return ep, lifted, []
            # Static analysis missed some globals: find them by storage and lift them too.
            if index is None:
                index = package_tensor_index(top)
                before = len(lifted.tensors)
                for t in consts.values():
                    hit = index.get((t.data_ptr(), tuple(t.shape), t.dtype))
                    if hit is not None:
                        lifted.add_global(*hit)
                if len(lifted.tensors) > before:
                    continue
            break
        outside = [k for k, t in consts.items() if t.numel() and t.data_ptr() in live]
        if outside:
            listing = ", ".join(
                f"{k} {tuple(consts[k].shape)} {dtype_name(consts[k].dtype)}" for k in outside
            )
            raise CompileError(
                f"{where}: reads tensor(s) that exist outside the function but are not module "
                f"globals of package {top!r} ({listing}): an object attribute, a closure "
                "variable, or another package's global. AOTInductor would bake their build-time "
                "values into the artifact, and later changes would silently be ignored.\n  "
                f"make each such tensor a module global (or a parameter/buffer of an nn.Module "
                f"global) of {top!r}, or pass it to the function as an argument"
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
                f"{sum(c['bytes'] for c in embedded)} bytes ({listing}), created inside the "
                "function (e.g. torch.tensor literals), so baked into the artifact"
            )
        return ep, lifted, embedded

    def compile_entry(self, entry: AotEntry, targets: list[Target], staging: Path) -> None:
        where = _where(entry, self.build_lib)
        try:
            args = entry.example_inputs()
        except AotBuildError as exc:
            raise CompileError(f"{where}: {exc}") from exc
        flat, in_spec = pytree.tree_flatten(args)
        try:
            leaves = tuple(leaf(v, f"example input leaf {i}") for i, v in enumerate(flat))
        except TypeError as exc:
            raise CompileError(f"{where}: {exc}; fix example_inputs") from exc
        top = entry.__wrapped__.__module__.split(".")[0]
        if not hasattr(sys.modules.get(top), "__path__"):
            raise CompileError(
                f"{where}: the entry is in the top-level module {top!r}, not in a package; "
                "aot_build ships artifacts inside a package folder. Move the module into a "
                "package (a folder with __init__.py)"
            )
        manifest = self.manifest(top)
        out_dir = staging / top / ARTIFACT_DIR
        out_dir.mkdir(parents=True, exist_ok=True)
        if not targets:  # every target was optional and skipped: the manifest says why
            return
        artifacts: list[Artifact] = []
        exported: dict[str, tuple[Any, Lifted, list[dict[str, Any]]]] = {}
        out_tree = ""
        for target in targets:
            if target.device not in exported:
                exported[target.device] = self.export(entry, where, args, target.device)
            ep, lifted, embedded = exported[target.device]
            t0 = time.perf_counter()
            try:
                built = aoti.compile_library(ep, target, self.job.inductor_options, out_dir, self.job.strip)
            except Exception as exc:
                raise _fail(
                    where,
                    f"AOTInductor could not compile it for {target.name}",
                    exc,
                    "see the compiler output above; check that a C++ compiler is on PATH of "
                    "the build machine and that inductor-options are valid",
                ) from exc
            dt = time.perf_counter() - t0
            out_tree = built.out_tree
            new = built.path.name not in manifest.files
            manifest.files[built.path.name] = FileRecord(built.sha256, built.size)
            artifacts.append(Artifact(target.name, target.device, RULE_AOTI, built.path.name, built.isa))
            say(
                f"{entry.key} [{target.name}] compiled in {dt:.1f} s, "
                f"{built.size / 1e6:.2f} MB{'' if new else ' (identical to another, stored once)'}"
                f", ISA {built.isa or '-'}"
            )
        ep, lifted, embedded = exported.get("cpu") or next(iter(exported.values()))
        variant = Variant(
            in_tree=pytree.treespec_dumps(in_spec),
            leaves=leaves,
            out_tree=out_tree,
            weights=tuple(lifted.bindings),
            modules=tuple(lifted.modules),
            embedded_constants=tuple(embedded),
            artifacts=tuple(artifacts),
        )
        manifest.entries[entry.key] = Entry(
            entry.__wrapped__.__module__,
            entry.__wrapped__.__qualname__,
            where.split("(")[-1].rstrip(")"),
            (variant,),
        )

    def run(self) -> int:
        staging = Path(self.job.out_dir)
        sys.path.insert(0, str(self.build_lib))
        entries = discover_entries(self.job.modules, self.job.packages)
        if not entries:
            say(f"no @aot_entry functions found in {len(self.job.modules)} modules; the wheel ships none")
            return 0
        targets = self.usable_targets()
        say(f"compiling {len(entries)} entries for {', '.join(t.name for t in targets) or 'no targets'}")
        t0 = time.perf_counter()
        for entry in entries:
            self.compile_entry(entry, targets, staging)
        total = 0
        for top, manifest in self.manifests.items():
            manifest.write(staging / top / ARTIFACT_DIR / MANIFEST_NAME)
            size = sum(f.size for f in manifest.files.values())
            total += size
            per_target: dict[str, int] = {}
            seen: set[str] = set()
            for e in manifest.entries.values():
                for v in e.variants:
                    for a in v.artifacts:
                        if a.file not in seen:
                            seen.add(a.file)
                            size_of = manifest.files[a.file].size
                            per_target[a.target] = per_target.get(a.target, 0) + size_of
            detail = ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in per_target.items())
            say(
                f"package {top}: {len(manifest.entries)} entries, {len(manifest.files)} files, "
                f"{size / 1e6:.2f} MB ({detail})"
            )
        say(f"done in {time.perf_counter() - t0:.1f} s; artifacts add {total / 1e6:.2f} MB to the wheel")
        return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # torch's own deprecation chatter while pickling tree specs; it says nothing to users.
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*", category=FutureWarning)
    if len(argv) != 1:
        print("usage: python -m aot_build.compile CONFIG.json", file=sys.stderr)
        return 2
    job = Job(**json.loads(Path(argv[0]).read_text()))
    try:
        return _Compiler(job).run()
    except AotBuildError as exc:
        print(f"\naot-build: error: {exc}", file=sys.stderr, flush=True)
        return 1
