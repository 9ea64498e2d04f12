"""Bind an ``@aot_entry`` to its artifacts and run them, or fall back to Python.

A call runs the compiled library only when everything it was compiled for holds: same torch
release, same argument structure, shapes, dtypes, strides and plain values, a library for
the arguments' device that this CPU can execute, an intact file, and weights of the shapes
it was built with. Otherwise the original function runs, with one warning per entry and
reason (``AOT_BUILD_STRICT=1``: an error instead).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree as pytree

from ..constants import ENV_DISABLE, ENV_STRICT
from ..errors import FallbackError, FallbackWarning, ManifestError
from ..manifest import Artifact, Manifest, TensorSpec, Variant
from ..targets import Target, best_cpu_target, cuda_target_fits, host_cpu_targets, machine, parse_target
from .artifacts import artifact_dir, manifest_for, open_library, verify

if TYPE_CHECKING:
    from ..decorate import AotEntry


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _release(version: str) -> str:
    return version.split("+")[0]


class Miss(Exception):
    """No artifact fits this call. ``reason`` groups warnings; ``detail`` explains."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


class _Fallback:
    """Runs the Python function, warning once per reason (or raising, in strict mode)."""

    def __init__(self, entry: AotEntry, strict: bool) -> None:
        self.fn = entry.__wrapped__
        self.key = entry.key
        self.strict = strict
        self.warned: set[str] = set()

    def __call__(self, miss: Miss, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        msg = f"aot_build: {self.key} runs as plain Python: {miss.detail}"
        if self.strict:
            raise FallbackError(f"{msg} ({ENV_STRICT}=1 makes this an error)")
        if miss.reason not in self.warned:
            self.warned.add(miss.reason)
            # user code -> AotEntry.__call__ -> _Bound.__call__ (or the always-lambda) -> here
            warnings.warn(msg, FallbackWarning, stacklevel=4)
        return self.fn(*args, **kwargs)


def _dtype(name: str) -> torch.dtype:
    d = getattr(torch, name, None)
    if not isinstance(d, torch.dtype):
        raise ManifestError(f"unknown dtype {name!r} in manifest")
    return d


def _check(t: Any, spec: TensorSpec, dtype: torch.dtype, device: str, what: str) -> None:
    if not isinstance(t, torch.Tensor):
        raise Miss("inputs", f"{what} is {type(t).__name__}, compiled for a tensor")
    if t.shape != spec.shape or t.dtype != dtype:
        raise Miss(
            "inputs",
            f"{what} is {tuple(t.shape)} {str(t.dtype)[6:]}, compiled for {spec.shape} {spec.dtype}",
        )
    if not (t.is_cpu if device == "cpu" else t.device.type == device):
        raise Miss("device", f"{what} is on {t.device}, no artifact for that device")
    if t.stride() != spec.stride:
        raise Miss(
            "inputs",
            f"{what} has strides {t.stride()}, compiled for {spec.stride} (pass a contiguous tensor)",
        )


def _path_getter(path: str) -> Callable[[Any], Any]:
    """Fetch ``a.b.weight`` below an nn.Module (or any object) on every call.

    Reads the modules' own ``_modules``/``_parameters``/``_buffers`` dicts, which is several
    times cheaper than ``nn.Module.__getattr__`` per level; anything else (properties,
    parametrizations, plain objects) takes ``getattr``.
    """
    *parents, leaf = path.split(".")

    def get(obj: Any) -> Any:
        for part in parents:
            children = obj.__dict__.get("_modules") if hasattr(obj, "__dict__") else None
            obj = children[part] if children and part in children else getattr(obj, part)
        own = getattr(obj, "__dict__", {})
        for slot in ("_parameters", "_buffers"):
            table = own.get(slot)
            if table and leaf in table:
                return table[leaf]
        return getattr(obj, leaf)

    return get


class _VariantRunner:
    """One compiled variant: checks a call against it and runs the chosen library."""

    def __init__(self, variant: Variant, folder: Path, manifest: Manifest) -> None:
        self.variant = variant
        self.folder = folder
        self.manifest = manifest
        self.in_spec = pytree.treespec_loads(variant.in_tree)
        self.flat = all(c.is_leaf() for c in self.in_spec.children()) and self.in_spec.type is tuple
        self.n_leaves = len(variant.leaves)
        self.leaves = [(lf, _dtype(lf.tensor.dtype) if lf.tensor else None) for lf in variant.leaves]
        out_spec = pytree.treespec_loads(variant.out_tree)
        self.out_spec = None if out_spec.is_leaf() else out_spec
        self.weights: list[
            tuple[dict[str, Any], str, Callable[[Any], Any] | None, TensorSpec, torch.dtype, str]
        ] = []
        for w in variant.weights:
            mod = sys.modules.get(w.module) or importlib.import_module(w.module)
            getter = _path_getter(w.path) if w.path else None
            label = f"weight {w.module}.{w.name}{'.' + w.path if w.path else ''}"
            self.weights.append((mod.__dict__, w.name, getter, w.spec, _dtype(w.spec.dtype), label))
        self.modules = [
            ((sys.modules.get(m.module) or importlib.import_module(m.module)).__dict__, m.name, m.training)
            for m in variant.modules
        ]
        self.by_device: dict[str, list[tuple[Target, Artifact]]] = {}
        for a in variant.artifacts:
            self.by_device.setdefault(a.device, []).append((parse_target(a.target, manifest.machine), a))
        self.cpu_pick: Artifact | Miss | None = None
        self.runners: dict[str, Any] = {}

    def _pick_cpu(self) -> Artifact:
        if self.cpu_pick is None:
            have = {t.name: a for t, a in self.by_device.get("cpu", [])}
            host = host_cpu_targets()
            best = best_cpu_target(set(have), host)
            self.cpu_pick = (
                have[best]
                if best
                else Miss(
                    "host",
                    f"no CPU artifact this CPU can run (artifacts: {', '.join(sorted(have)) or 'none'}; "
                    f"this CPU runs: {', '.join(host)})",
                )
            )
        if isinstance(self.cpu_pick, Miss):
            raise self.cpu_pick
        return self.cpu_pick

    def pick(self, device: torch.device) -> Artifact:
        if device.type == "cpu":
            return self._pick_cpu()
        cap = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        fits = [a for t, a in self.by_device.get(device.type, []) if cap and cuda_target_fits(t, cap)]
        if not fits:
            raise Miss("device", f"no artifact for {device} (capability {cap})")
        return max(fits, key=lambda a: a.target)

    def runner(self, art: Artifact) -> Any:
        r = self.runners.get(art.file)
        if r is None:
            path = self.folder / art.file
            record = self.manifest.files.get(art.file)
            problem = "not listed in the manifest" if record is None else verify(path, record.sha256)
            if problem:
                raise Miss("artifact", f"{problem}; reinstall the package")
            try:
                r = open_library(path, art.device)
            except Exception as exc:  # a library the platform refuses
                raise Miss("artifact", f"cannot load {art.file}: {exc}") from exc
            self.runners[art.file] = r
        return r

    def run(self, args: tuple[Any, ...]) -> Any:
        if self.flat:
            if len(args) != self.n_leaves:
                raise Miss("inputs", f"called with {len(args)} arguments, compiled for {self.n_leaves}")
            flat: list[Any] | tuple[Any, ...] = args
        else:
            flat, tree = pytree.tree_flatten(args)
            if tree != self.in_spec:
                raise Miss("inputs", f"argument structure {tree} differs from the compiled {self.in_spec}")
        tensors: list[torch.Tensor] = []
        device: torch.device | None = None
        for i, (v, (lf, dtype)) in enumerate(zip(flat, self.leaves, strict=True)):
            if lf.tensor is None:
                if type(v) is not type(lf.value) or v != lf.value:
                    raise Miss("inputs", f"argument leaf {i} is {v!r}, compiled for {lf.value!r}")
                continue
            if device is None and isinstance(v, torch.Tensor):
                device = v.device
            assert dtype is not None
            _check(v, lf.tensor, dtype, device.type if device else "cpu", f"argument leaf {i}")
            tensors.append(v)
        art = self.pick(device or torch.device("cpu"))
        for d, name, training in self.modules:
            obj = d.get(name)
            if getattr(obj, "training", training) != training:
                raise Miss(
                    "weights",
                    f"module global {name} has training={not training}, compiled with "
                    f"training={training}; call .{'train' if training else 'eval'}()",
                )
        for d, name, getter, spec, dtype, label in self.weights:
            try:
                t = d[name] if getter is None else getter(d[name])
            except (KeyError, AttributeError) as exc:
                raise Miss(
                    "weights", f"global {name} no longer holds the weight it was compiled with ({exc})"
                ) from exc
            _check(t, spec, dtype, art.device, label)
            tensors.append(t)
        if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
            raise Miss(
                "autograd",
                "inputs or weights require grad and grad mode is on; artifacts are inference-"
                "only: call under torch.no_grad()/torch.inference_mode() or requires_grad_(False)",
            )
        out = self.runner(art).run(tensors)
        return out[0] if self.out_spec is None else pytree.tree_unflatten(out, self.out_spec)


def bind(entry: AotEntry) -> Callable[..., Any]:
    """The callable an entry forwards to from now on: compiled, or the plain function."""
    fn = entry.__wrapped__
    if _flag(ENV_DISABLE):
        return fn
    fallback = _Fallback(entry, _flag(ENV_STRICT))
    top = fn.__module__.split(".")[0]

    def always(reason: str, detail: str) -> Callable[..., Any]:
        miss = Miss(reason, detail)
        return lambda *a, **k: fallback(miss, a, k)

    try:
        manifest = manifest_for(top)
    except ManifestError as exc:
        return always("manifest", str(exc))
    if manifest is None:
        if fallback.strict:
            return always(
                "manifest",
                f"package {top} ships no aot_build manifest (not built as a wheel by aot-build, "
                "or an editable install)",
            )
        return fn  # source tree or editable install: plain Python, by design, no noise
    record = manifest.entries.get(entry.key)
    if record is None:
        return always(
            "manifest",
            "not in the package's manifest (the wheel was built before this entry existed); "
            "rebuild the wheel",
        )
    if _release(torch.__version__) != _release(manifest.torch_version):
        return always(
            "torch",
            f"artifacts were built with torch {manifest.torch_version}, this is torch "
            f"{torch.__version__}; install torch=={_release(manifest.torch_version)} or rebuild",
        )
    if manifest.machine != machine():
        return always("host", f"artifacts are for {manifest.machine}, this machine is {machine()}")
    folder = artifact_dir(top)
    assert folder is not None
    try:
        variants = [_VariantRunner(v, folder, manifest) for v in record.variants]
    except (ManifestError, ImportError, ValueError) as exc:
        return always("manifest", f"cannot use its manifest record: {exc}")

    return _Bound(variants, fallback)


class _Bound:
    """An entry bound to its manifest record: tries each variant, else falls back."""

    def __init__(self, variants: list[_VariantRunner], fallback: _Fallback) -> None:
        self.variants = variants
        self.fallback = fallback

    def cpu_target(self) -> str | None:
        """The CPU target this host loads for the entry, None when none fits."""
        for v in self.variants:
            try:
                return v._pick_cpu().target
            except Miss:
                continue
        return None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            return self.fallback(
                Miss("inputs", "called with keyword arguments; artifacts take positional arguments"),
                args,
                kwargs,
            )
        miss: Miss | None = None
        for v in self.variants:
            try:
                return v.run(args)
            except Miss as m:
                miss = miss or m
        assert miss is not None
        return self.fallback(miss, args, kwargs)
