"""Bind an ``@aot_entry`` to its artifacts and run them, or fall back to Python.

A call runs the compiled library only when everything it was compiled for holds: same torch
release, a variant whose argument specs the call meets (dtypes, ranks, fixed sizes, dynamic
dimensions in range, layout, plain values), package state as the trace saw it (guards),
weights of the compiled shapes, torch's attention backend flags as compiled (a program that
calls SDPA: :mod:`aot_build.sdpa`), a library for the arguments' device that this CPU can
execute, an intact file. Otherwise the original function runs, with one warning per entry
and failing check (``AOT_BUILD_STRICT=1``: an error instead).

Calls made while the caller is being traced or transformed (torch.compile, torch.export,
vmap/grad, fake or meta tensors, torch function and dispatch modes) run the Python function
silently: to such a caller an entry is plain torch code.
"""

from __future__ import annotations

import functools
import itertools
import os
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils import _pytree as pytree

from .. import backends, collector, trees, values
from ..constants import ENV_DISABLE, ENV_STRICT
from ..errors import FallbackError, FallbackWarning, ManifestError
from ..guards.bound import BindError, BoundState
from ..guards.weights import Held, WeightCache
from ..manifest import ROLE_BACKWARD, ROLE_FORWARD, ROLE_GRAD, ROLE_INFERENCE, Artifact, Manifest, Variant
from ..names import package_root
from ..records import record
from ..targets import Target, best_cpu_target, cuda_target_fits, host_cpu_targets, machine, parse_target
from .artifacts import evaluator_for, manifest_folder, manifest_for, verify
from .checks import EXCEPTION, Check, CheckBuilder, RefusingCheck

if TYPE_CHECKING:
    from ..decorate import AotEntry
    from ..sdpa import FlagCheck

_LEAF_TYPES = frozenset({torch.Tensor, torch.nn.Parameter, int, float, bool, str, type(None)})
_TENSOR_TYPES = frozenset({torch.Tensor, torch.nn.Parameter})
_CPU = torch.device("cpu")

_is_grad_enabled = torch.is_grad_enabled
_torch_function_mode = torch._C._is_torch_function_mode_enabled
_dispatch_modes = torch._C._len_torch_dispatch_stack
_functorch_level = torch._C._functorch.peek_interpreter_stack
_any_autocast = torch._C._is_any_autocast_enabled
_default_dtype = torch.get_default_dtype
_deterministic = torch._C._get_deterministic_algorithms


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def _release(version: str) -> str:
    return version.split("+")[0]


class Miss(Exception):
    """No artifact fits this call. ``reason`` names the kind of mismatch, ``key`` the check
    (warnings are given once per key), ``detail`` explains."""

    def __init__(self, reason: str, detail: str, key: str = "") -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.key = key or reason


class _Fallback:
    """Runs the Python function, warning once per failing check (or raising, in strict mode)."""

    def __init__(self, entry: AotEntry, strict: bool) -> None:
        self.fn = entry.__wrapped__
        self.key = entry.key
        self.strict = strict
        self.warned: set[tuple[str, str]] = set()

    def __call__(self, miss: Miss, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        msg = f"aot_build: {self.key} runs as plain Python: {miss.detail}"
        if self.strict:
            raise FallbackError(f"{msg} ({ENV_STRICT}=1 makes this an error)")
        key = (miss.reason, miss.key)
        if key not in self.warned:
            self.warned.add(key)
            # user code -> AotEntry.__call__ -> _Bound.__call__ (or the always-lambda) -> here
            warnings.warn(msg, FallbackWarning, stacklevel=4)
        return self.fn(*args, **kwargs)


_RUNNERS: dict[tuple[str, str], Any] = {}
_LOAD_FAILED: dict[tuple[str, str], Miss] = {}
_VERIFIED: dict[str, str | None] = {}
_RUNNERS_LOCK = threading.Lock()


_NO_BACKEND: dict[tuple[str, str], Miss] = {}


def _backend(art: Artifact) -> backends.Backend:
    """The installed backend that loads ``art``; Miss when it is missing or of another version
    (remembered: looking for an uninstalled backend reads every distribution's entry points)."""
    refused = _NO_BACKEND.get((art.backend, art.backend_version))
    if refused is not None:
        raise refused
    try:
        return _find_backend(art)
    except Miss as miss:
        _NO_BACKEND[(art.backend, art.backend_version)] = miss
        raise


def _find_backend(art: Artifact) -> backends.Backend:
    try:
        backend = backends.find(art.backend)
    except (backends.UnknownBackend, TypeError) as exc:
        raise Miss(
            "backend",
            f"its artifact {art.file} was built by compile backend {art.backend!r}: {exc}",
            f"backend {art.backend}",
        ) from exc
    if backend.version != art.backend_version:
        raise Miss(
            "backend",
            f"its artifact {art.file} was built by compile backend {art.backend!r} version "
            f"{art.backend_version}, this environment has version {backend.version}; install the "
            "backend's release the wheel was built with, or rebuild the wheel",
            f"backend {art.backend}",
        )
    return backend


def _runner(folder: Path, art: Artifact, manifest: Manifest, device: torch.device, function: Any) -> Any:
    """The callable for ``art`` on ``device`` in its backend's calling convention: verified and
    loaded by its backend once per process."""
    path = folder / art.file
    key = (str(path), str(device))
    r = _RUNNERS.get(key)
    if r is not None:
        return r
    with _RUNNERS_LOCK:
        r = _RUNNERS.get(key)
        if r is not None:
            return r
        if str(path) not in _VERIFIED:
            record = manifest.files.get(art.file)
            try:
                checked = "not listed in the manifest" if record is None else verify(path, record.sha256)
            except MemoryError as exc:  # not remembered: the next call tries again
                raise Miss(
                    "artifact",
                    f"cannot load {art.file} (backend {art.backend}): out of memory while verifying it",
                    f"artifact {art.file}",
                ) from exc
            _VERIFIED[str(path)] = checked
        problem = _VERIFIED[str(path)]
        if problem:
            raise Miss("artifact", f"{problem}; reinstall the package", f"artifact {art.file}")
        failed = _LOAD_FAILED.get(key)
        if failed is not None:  # loading again would fail again, and may take seconds
            raise failed
        backend = _backend(art)
        try:
            r = backend.load(path, str(device), function)
        except Exception as exc:  # a library the platform refuses, a backend that cannot load
            miss = Miss(
                "artifact",
                f"cannot load {art.file} (backend {art.backend}): {type(exc).__name__}: {exc}",
                f"artifact {art.file}",
            )
            if isinstance(exc, backends.Unloadable):
                _LOAD_FAILED[key] = miss
            # else (out of memory, say) the next call tries again
            raise miss from exc
        _RUNNERS[key] = r
        return r


class _VariantRunner:
    """One compiled variant: its check, its libraries, and how to build the result."""

    def __init__(
        self,
        variant: Variant,
        folder: Path,
        manifest: Manifest,
        size_one_symbols: frozenset[str],
        function: Any,
        native: Any = None,
        earlier: Sequence[_VariantRunner] = (),
    ) -> None:
        self.variant = variant
        #: The first of the entry's ``earlier`` variants with the very same guard tree (the
        #: manifest parses equal trees once): its bound state and weights serve this one too.
        self.shares = next((r for r in earlier if r.variant.state is variant.state), None)
        self.folder = folder
        self.manifest = manifest
        self.function = function
        self.native = native
        self.by_device: dict[str, list[tuple[Target, Artifact]]] = {}
        #: A training entry's artifacts by (target, role): "forward", "backward", "grad".
        self.by_role: dict[tuple[str, str], Artifact] = {}
        for a in variant.artifacts:
            if a.role == ROLE_INFERENCE:
                self.by_device.setdefault(a.device, []).append((parse_target(a.target, manifest.machine), a))
            else:
                self.by_role[(a.target, a.role)] = a
        self.trains = bool(self.by_role)
        #: The backend's calling convention (one backend builds all of an entry's artifacts).
        self.convention = _convention(variant)
        self._size_one_symbols = size_one_symbols
        self.n_tensors = sum(lf.tensor is not None for lf in variant.leaves)
        #: What a call's leaves must give to reach this variant: (dtype, rank) or the value.
        self.dispatch_key = tuple(
            (getattr(torch, lf.tensor.dtype), len(lf.tensor.dims))
            if lf.tensor is not None
            else values.decode(lf.value)
            for lf in variant.leaves
        )
        self.cpu_pick: Artifact | Miss | None = None
        self.cpu_runner: Any = None
        #: The tensors the library writes in place, by index among those it takes.
        self.mutated = variant.mutated
        #: The SDPA flags it was compiled under, when it calls SDPA: checked on each call.
        self.sdpa: FlagCheck | None = None
        if variant.sdpa:  # imported here: most entries call no attention, and a first call imports the shim
            from ..sdpa import FlagCheck

            self.sdpa = FlagCheck(variant.sdpa)

    @functools.cached_property
    def state(self) -> BoundState | Miss:
        """The guard tree bound in this process, on first use (a tree that cannot be bound
        makes every call fall back, with the reason)."""
        if self.shares is not None:
            return self.shares.state
        try:
            with collector.paused():  # thousands of nodes, kept for the process
                return BoundState(self.variant.state, self.function, self.native)
        except BindError as exc:
            return Miss("manifest", f"cannot bind its guards: {exc}", "guards")
        except MemoryError:  # not remembered: the next call tries again
            raise
        except Exception as exc:  # whatever a damaged record makes fail: fall back, never crash
            return Miss("manifest", f"cannot bind its guards: {type(exc).__name__}: {exc}", "guards")

    @functools.cached_property
    def weights(self) -> WeightCache:
        if self.shares is not None:  # the same weights, held once: the evaluator's snapshot holds for both
            return self.shares.weights
        state = self.state
        assert isinstance(state, BoundState)
        return WeightCache(self.variant.state.weights, state.weight_labels, state.gather)

    def state_check(self, self_obj: Any) -> Held | Miss:
        """Every guard on package state, and the weights to pass: held ones while their paths
        still lead to them, read again when one was replaced; first, for a program that calls
        SDPA, torch's SDPA flags."""
        if self.sdpa is not None:
            changed = self.sdpa.changed()
            if changed is not None:
                return Miss("sdpa", self.sdpa.explain(changed), f"sdpa {changed}")
        state = self.state
        if isinstance(state, Miss):
            return state
        cache = self.weights
        held = cache.get(self_obj)
        if held is None and cache.specs:  # first call (for this instance): read them now
            fresh = cache.read(self_obj)
            # one that cannot be used fails its weight check below: every other check comes first
            held = None if isinstance(fresh, str) else fresh
        code = state.check(self_obj, held.tensors if held is not None else ())
        if code != -1 and state.is_weight(code):
            fresh = cache.read(self_obj)
            if isinstance(fresh, str):
                return Miss("weights", fresh, fresh.split(" is ")[0])
            held = fresh
            code = state.check(self_obj, held.tensors)
        if code != -1:
            detail = state.explain(code, self_obj, held.tensors if held is not None else None)
            return Miss("state", detail, detail)
        if held is None:  # no weights at all
            fresh = cache.read(self_obj)
            assert not isinstance(fresh, str)
            held = fresh
        if not held.metadata.check(*held.tensors):  # converted in place (.half(), .data = ...)
            fresh = cache.read(self_obj)
            if isinstance(fresh, str):
                return Miss("weights", fresh, fresh.split(" is ")[0])
            held = fresh
        return held

    @functools.cached_property
    def check(self) -> Check | RefusingCheck:
        """Generated on first use: most calls of an entry meet one variant only."""
        try:
            with collector.paused():
                return CheckBuilder(
                    self.variant, "cuda" in self.by_device, self._size_one_symbols, self.trains, self.mutated
                ).build()
        except MemoryError:  # not remembered: the caller falls back and the next call tries again
            raise
        except Exception as exc:  # a record the generator cannot use: fall back, never crash
            return RefusingCheck(f"cannot use its manifest record: {type(exc).__name__}: {exc}")

    @functools.cached_property
    def build(self) -> Callable[[Any, tuple[Any, ...], tuple[Any, ...]], Any]:
        """``build(outputs, leaves, tensors)``: the function's result from the library's
        outputs, the call's argument leaves and the tensors passed (inputs, then weights)."""
        out_leaves = self.variant.out_leaves
        library_index = list(
            itertools.accumulate((o.kind in ("tensor", "sym") for o in out_leaves), initial=0)
        )

        def leaf(i: int, const: Callable[[Any], str]) -> str:
            o, k = out_leaves[i], library_index[i]
            if o.kind == "tensor":
                return f"o[{k}]"
            if o.kind == "sym":
                return f"{ {'int': 'int', 'float': 'float'}.get(str(o.value), 'bool') }(o[{k}])"
            if o.kind == "value":
                value = values.decode(o.value)
                # mutable values are decoded afresh per call: callers may change them
                return (
                    f"{const(values.decode)}({const(o.value)})"
                    if isinstance(value, (list, dict))
                    else const(value)
                )
            if o.kind == "input":
                return f"a[{o.index}]"
            return f"r[{self.n_tensors + o.index}]"

        try:
            return trees.compile_builder(self.variant.outputs, leaf, "o, a, r")
        except MemoryError:  # not remembered: the next call tries again
            raise
        except Exception as exc:  # a record the generator cannot use: fall back, never crash
            detail = f"cannot use its manifest record: {type(exc).__name__}: {exc}"

            def refuse(*_: Any) -> Any:
                raise Miss("manifest", detail, "record")

            return refuse

    def pick_cpu(self) -> Artifact:
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
        """The inference artifact serving ``device``: the best target this machine runs."""
        if device.type == "cpu":
            return self.pick_cpu()
        cap = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
        fits = [a for t, a in self.by_device.get(device.type, []) if cap and cuda_target_fits(t, cap)]
        if not fits:
            raise Miss("device", f"no artifact for {device} (capability {cap})")
        return max(fits, key=lambda a: parse_target(a.target).capability or (0, 0))

    def runner(self, device: torch.device) -> Any:
        if device.type == "cpu":
            if self.cpu_runner is None:
                self.cpu_runner = _runner(self.folder, self.pick_cpu(), self.manifest, _CPU, self.function)
            return self.cpu_runner
        return _runner(self.folder, self.pick(device), self.manifest, device, self.function)

    def trainer(self, device: torch.device) -> Any:
        """What runs a call with gradients: the forward and backward libraries of the
        inference pick's target joined by autograd (flat backends), or the backend's own
        grad-enabled callable (call backends)."""
        target = self.pick(device).target
        call = self.convention == backends.CALL
        forward = self.by_role.get((target, ROLE_GRAD if call else ROLE_FORWARD))
        backward = self.by_role.get((target, ROLE_BACKWARD))
        if forward is None or (self.convention == backends.FLAT and backward is None):
            raise Miss("autograd", f"no training artifact for target {target} (the manifest lists none)")
        fwd = _runner(self.folder, forward, self.manifest, device, self.function)
        if self.convention == backends.CALL:
            return fwd
        assert backward is not None
        key = (forward.file, backward.file, str(device))
        joined = _TRAINERS.get(key)
        if joined is None:
            from .autograd import training_call

            bwd = _runner(self.folder, backward, self.manifest, device, self.function)
            record = self.variant.training
            if record is None:
                raise Miss("manifest", "cannot use its training record: the manifest has none", "training")
            try:
                joined = _TRAINERS[key] = training_call(fwd, bwd, record)
            except Exception as exc:  # a record the runtime cannot use: fall back, never crash
                raise Miss("manifest", f"cannot use its training record: {exc}", "training") from exc
        return joined

    def failure(self, code: int, self_obj: Any, leaves: tuple[Any, ...]) -> Miss:
        """What failed check ``code`` means for this call. Warnings are given once per key:
        per check for arguments (sizes vary from call to call), per change for package state."""
        if code == EXCEPTION:
            return Miss("inputs", "the arguments could not be checked (an exception while reading them)")
        f = self.check.failures[code]
        try:
            detail = f.explain(self_obj, leaves)
        except Exception as exc:  # describing must never fail the call
            detail = f"{f.key} differs ({type(exc).__name__})"
        return Miss(f.reason, detail, detail if f.reason == "state" else f.key)

    def run(
        self,
        r: tuple[Any, ...],
        held: Held,
        leaves: tuple[Any, ...],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """The result of a call whose argument check gave ``r`` and whose weights are ``held``;
        ``args``/``kwargs`` as the caller passed them (for CALL backends)."""
        device = r[0].device if self.n_tensors and not r[0].is_cpu else _CPU
        r = r + held.tensors
        if self.mutated:
            problem = self.written_problem(r)
            if problem is not None:
                raise problem
        grad = False
        if self.trains:
            grad = _is_grad_enabled() and any(type(t) in _TENSOR_TYPES and t.requires_grad for t in r)
        elif held.need_grad and _is_grad_enabled():
            raise Miss("autograd", _AUTOGRAD_WEIGHTS)
        if grad:
            runner = self.trainer(device)
        elif device is _CPU and self.cpu_runner is not None:
            runner = self.cpu_runner
        else:
            runner = self.runner(device)
        try:
            if self.convention == backends.CALL:
                if grad:
                    return runner(*args, **kwargs)
                with torch.no_grad():  # checked: nothing requires grad; built for no-grad calls
                    return runner(*args, **kwargs)
            out = runner(r)
            if self.mutated:  # written by the library, unseen by autograd: as eager's in-place ops
                _increment_version(tuple(r[i] for i in self.mutated))
        except backends.Refused as exc:
            backend = self.variant.artifacts[0].backend
            raise Miss(
                "backend", f"backend {backend} refused the call: {exc}", f"backend {backend} refused"
            ) from exc
        except Exception as exc:
            raise Miss(
                "artifact", f"the library failed: {type(exc).__name__}: {exc}", "library error"
            ) from exc
        return self.build(out, leaves, r)

    def written_label(self, i: int) -> str:
        """``argument out``, ``weight NET.1.running_mean``: tensor ``i`` the library takes."""
        args = [self.variant.label(k) for k, lf in enumerate(self.variant.leaves) if lf.tensor is not None]
        return f"argument {args[i]}" if i < len(args) else f"weight {self.weights.labels[i - len(args)]}"

    def written_problem(self, r: tuple[Any, ...]) -> Miss | None:
        """Why the library must not write this call's tensors in place (None: it may): a
        written tensor that shares memory with another tensor of the call (eager's in-place
        op would read what it writes; the library reads and writes in another order), that
        requires grad in grad mode, or that eager refuses to write (an inference tensor
        outside inference mode, elements overlapping within the tensor)."""
        mutated = frozenset(self.mutated)
        for i in self.mutated:
            t = r[i]
            if t.requires_grad and _is_grad_enabled():
                what = self.written_label(i)
                return Miss(
                    "autograd",
                    f"{what} is updated in place and requires grad while grad mode is on; the "
                    "library does not record the update for autograd. Call under torch.no_grad()",
                    f"{what} requires grad",
                )
            if t.is_inference() and not _inference_mode():
                what = self.written_label(i)
                return Miss(
                    "inplace",
                    f"{what} is updated in place and is an inference tensor outside inference mode "
                    "(eager refuses the update)",
                    f"{what} inference",
                )
            if not t.is_contiguous() and torch._debug_has_internal_overlap(t) == 1:
                what = self.written_label(i)
                return Miss(
                    "inplace",
                    f"{what} is updated in place and its elements overlap in memory (an expanded "
                    "tensor; eager refuses the update)",
                    f"{what} overlap",
                )
        pair = _overlapping(r, mutated)
        if pair is None:
            return None
        a, b = (self.written_label(k) for k in pair)
        return Miss(
            "alias",
            f"{a} is updated in place and shares memory with {b}; the compiled library may read "
            "what it already wrote. Pass tensors that do not share memory (.clone())",
            f"alias {a} {b}",
        )


def _overlapping(tensors: tuple[Any, ...], written: frozenset[int]) -> tuple[int, int] | None:
    """Two of ``tensors`` whose memory overlaps, one of them in ``written``; None when none do.
    A sweep over the byte ranges sorted by start (a range holds every element's bytes)."""
    spans = []
    for i, t in enumerate(tensors):
        n = t.numel()
        if not n:
            continue
        size = t.element_size()
        extent = 1 + sum((d - 1) * abs(s) for d, s in zip(t.shape, t.stride(), strict=True))
        start = t.data_ptr()
        spans.append((start, start + extent * size, i))
    spans.sort()
    active: list[tuple[int, int]] = []  # (end, index) of the ranges that reach the current one
    for start, end, i in spans:
        active = [(e, k) for e, k in active if e > start]
        for _, k in active:
            if k in written or i in written:
                return (k, i) if k in written else (i, k)
        active.append((end, i))
    return None


_increment_version = torch._C._increment_version
_inference_mode = torch.is_inference_mode_enabled

_TRAINERS: dict[tuple[str, str, str], Any] = {}


def _convention(variant: Variant) -> str:
    """The calling convention of the variant's backend; FLAT when it is not installed
    (its artifacts are refused when loaded, with the reason)."""
    if not variant.artifacts:
        return backends.FLAT
    try:
        return backends.find(variant.artifacts[0].backend).convention
    except (backends.UnknownBackend, TypeError):
        return backends.FLAT


_AUTOGRAD_WEIGHTS = (
    "weights require grad and grad mode is on; artifacts are inference-only: call under "
    "torch.no_grad()/torch.inference_mode() or requires_grad_(False) the weights"
)


def bind(entry: AotEntry) -> Callable[..., Any]:
    """The callable an entry forwards to from now on: compiled, or the plain function."""
    fn = entry.__wrapped__
    if _flag(ENV_DISABLE):
        return fn
    fallback = _Fallback(entry, _flag(ENV_STRICT))
    top = package_root(fn.__module__)

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
    try:
        record = manifest.entry(entry.key)
    except ManifestError as exc:
        return always("manifest", str(exc))
    except MemoryError:
        return _bind_later(entry, fallback)
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
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if manifest.python_version != python:  # the trace was of the code as that Python runs it
        return always(
            "host", f"artifacts were traced under Python {manifest.python_version}, this is {python}"
        )
    folder = manifest_folder(manifest)
    assert folder is not None
    try:
        size_one: dict[int, frozenset[str]] = {}  # per input set: symbols with a size-one variant
        for v in record.variants:
            size_one[v.input_set] = size_one.get(v.input_set, frozenset()) | frozenset(v.size_one)
        native = evaluator_for(top, manifest)
        variants: list[_VariantRunner] = []
        for v in record.variants:
            variants.append(_VariantRunner(v, folder, manifest, size_one[v.input_set], fn, native, variants))
    except MemoryError:
        return _bind_later(entry, fallback)
    except Exception as exc:  # whatever a damaged record makes fail: fall back, never crash
        return always("manifest", f"cannot use its manifest record: {type(exc).__name__}: {exc}")
    if not variants:
        return always("manifest", "the manifest lists no compiled variant (every target was skipped)")
    default_dtype = getattr(torch, manifest.default_dtype, None)
    if not isinstance(default_dtype, torch.dtype):
        return always("manifest", f"unknown default dtype {manifest.default_dtype!r}")
    return _Bound(entry, variants, fallback, default_dtype)


_OUT_OF_MEMORY = "out of memory while reading its manifest record (the next call tries again)"


def _bind_later(entry: AotEntry, fallback: _Fallback) -> Callable[..., Any]:
    """Binding ran out of memory: this call falls back, and the next one binds again (a
    transient failure is not remembered as the entry's state)."""
    bound: Callable[..., Any] | None = None
    first = True

    def call(*args: Any, **kwargs: Any) -> Any:
        nonlocal bound, first
        if first:
            first = False
            return fallback(Miss("memory", _OUT_OF_MEMORY), args, kwargs)
        if bound is None:
            bound = bind(entry)
        return bound(*args, **kwargs)

    return call


class _Bound:
    """An entry bound to its compiled variants: dispatches each call, else falls back."""

    def __init__(
        self, entry: AotEntry, variants: list[_VariantRunner], fallback: _Fallback, default_dtype: torch.dtype
    ) -> None:
        self.fn = entry.__wrapped__
        self.call_signature = entry.call_signature
        self.method = entry.is_method
        self.variants = variants
        self.fallback = fallback
        self.default_dtype = default_dtype
        # Variants by argument structure, then by (dtype and rank, or plain value) per leaf; within a
        # bucket the dynamic variant first (its range starts at 2, so a size-1 call fails it
        # at once and goes on to the size-one variants).
        self.structures: list[_Structure] = []
        for v in sorted(variants, key=lambda v: len(v.variant.size_one)):
            spec = trees.decode(v.variant.inputs)
            found = next((st for st in self.structures if st.spec == spec), None)
            if found is None:
                found = _Structure(spec, _is_flat(spec, len(v.variant.leaves)), {})
                self.structures.append(found)
            found.table.setdefault(v.dispatch_key, []).append(v)
        self.single = variants[0] if len(variants) == 1 and self.structures[0].flat else None

    def cpu_target(self) -> str | None:
        """The CPU target this host loads for the entry, None when none fits."""
        for v in self.variants:
            try:
                return v.pick_cpu().target
            except Miss:
                continue
        return None

    def _candidates(self, rest: tuple[Any, ...]) -> tuple[tuple[Any, ...], list[_VariantRunner]] | Miss:
        """The flattened arguments and the variants that may serve them (one dict lookup)."""
        plain = all(type(a) in _LEAF_TYPES for a in rest)
        if plain:
            leaves, spec = rest, None  # a flat tuple: no need to flatten
        else:
            flat, spec = pytree.tree_flatten(rest)
            leaves = tuple(flat)
        for st in self.structures:
            if st.spec == spec if spec is not None else st.flat and st.spec.num_children == len(leaves):
                key = tuple((a.dtype, a.dim()) if type(a) in _TENSOR_TYPES else a for a in leaves)
                try:
                    found = st.table.get(key)
                except TypeError:  # an unhashable plain value
                    found = None
                # no variant for these dtypes/values: the first one explains the mismatch
                return leaves, found or next(iter(st.table.values()))
        compiled = self.structures[0].spec
        got = spec if spec is not None else pytree.tree_flatten(rest)[1]
        return Miss("inputs", f"argument structure {got} differs from the compiled {compiled}", "structure")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _torch_function_mode() or _dispatch_modes() or _functorch_level() is not None:
            return self.fn(*args, **kwargs)  # traced or transformed: plain torch code to the caller
        if _any_autocast():
            return self.fallback(
                Miss(
                    "autocast",
                    "autocast is enabled: eager would compute in lower precision; "
                    "artifacts are compiled without autocast",
                ),
                args,
                kwargs,
            )
        if _deterministic():
            return self.fallback(
                Miss(
                    "deterministic",
                    "deterministic algorithms are on (torch.use_deterministic_algorithms): eager "
                    "would pick deterministic kernels, and the function may read the setting; "
                    "artifacts are compiled with them off",
                ),
                args,
                kwargs,
            )
        if _default_dtype() is not self.default_dtype:
            return self.fallback(
                Miss("dtype", f"the default dtype is {_default_dtype()}, compiled with {self.default_dtype}"),
                args,
                kwargs,
            )
        canonical = self.call_signature.canonical(args, kwargs)
        if canonical is None:
            return self.fn(*args, **kwargs)  # the function raises its own TypeError
        self_obj = canonical[0] if self.method else None
        rest = canonical[1:] if self.method else canonical
        single = self.single
        if single is not None and all(type(a) in _LEAF_TYPES for a in rest):
            candidates = [single]
            leaves = rest
        else:
            found = self._candidates(rest)
            if isinstance(found, Miss):
                return self.fallback(found, args, kwargs)
            leaves, candidates = found
        first: tuple[int, _VariantRunner] | None = None
        for v in candidates:
            try:
                check = v.check
            except MemoryError:  # generating it ran out of memory: not remembered
                return self.fallback(Miss("memory", _OUT_OF_MEMORY), args, kwargs)
            r = check.fast(self_obj, *leaves)
            if type(r) is int:
                first = first or (r, v)  # the dynamic variant's failure explains best
                continue
            held = v.state_check(self_obj)
            if isinstance(held, Miss):
                return self.fallback(held, args, kwargs)
            try:
                return v.run(r, held, leaves, args, kwargs)
            except Miss as miss:
                return self.fallback(miss, args, kwargs)
        assert first is not None
        code, variant = first
        return self.fallback(variant.failure(code, self_obj, leaves), args, kwargs)


@record
class _Structure:
    """Variants sharing one argument structure, by dispatch key."""

    spec: pytree.TreeSpec
    flat: bool
    table: dict[tuple[Any, ...], list[_VariantRunner]]


def _is_flat(spec: pytree.TreeSpec, n: int) -> bool:
    return spec.type is tuple and spec.num_children == n and all(c.is_leaf() for c in spec.children())
