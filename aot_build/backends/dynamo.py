"""The ``dynamo`` compile backend: upstream PyTorch's precompile API (``torch.compile(fn,
fullgraph=True).aot_compile(...)`` / ``torch.compiler.load_compiled_function``) on the
function itself, not on an exported program.

What upstream gives, and what this module adds (measured with torch 2.13, CPU):

* The saved artifact holds Dynamo's transformed bytecode, its guards and Inductor's *source*
  (C++ kernels and the Python wrapper), not binaries: :func:`load` compiles the C++ (seconds
  per file, a C++ compiler on PATH is required; without one Inductor's vector-ISA probe raises
  ``InvalidCxxCompiler``). :func:`load` turns every such failure into :class:`DynamoLoadError`.
* Module globals the function reads (``nn.Module`` weights, global tensors) are *not* stored:
  they are saved as upstream's ``external_data`` references and rebound at load to the live
  objects of the function's module; every call re-reads the module's globals, so a
  ``load_state_dict`` or a rebinding after import is seen.
* Upstream drops every guard on globals when saving (``is_global``) and then cannot load a
  function that iterates a global module (``'_Missing' object has no attribute '_modules'``,
  from the key-order guard on ``model._modules``). Here all guards are kept (shapes, dtypes,
  strides and ``requires_grad`` of the weights, module structure, constants such as
  ``GELU.approximate``, hooks), the guard scope is completed with the live globals at load,
  and a call that fails a guard raises :class:`DynamoGuardError`: the loaded function never
  recompiles and never runs outside what was compiled.
* The saved global-state guard pins ``torch.get_num_threads()`` of the build machine; it is
  rewritten at load to this process's thread count (the kernels are built with
  ``cpp.dynamic_threads``, so they size their work at run time). Grad mode, autocast and the
  default dtype stay guarded: an artifact built with grad enabled refuses ``no_grad`` calls.
* The vector ISA Inductor generated code for is recorded in the file; at load Inductor is held
  to that ISA (raising :class:`DynamoLoadError` when this CPU lacks it).

* :class:`DynamoBackend` is the backend (:data:`~aot_build.backends.CALL` convention): it builds under
  the target's pinned vector ISA and Inductor options, under ``torch.no_grad()`` for inference
  entries (the artifact then serves only no_grad calls; an argument requiring grad is passed
  detached, a weight's ``requires_grad`` stays guarded) or with grad enabled for training
  entries. Method entries work: ``self`` is an argument, its weights are read from it per call
  (its class must be importable by name: a guard pickles it).

File format (``<sha256[:24]>.dynamo``): a line ``AOTDYNAMO1``, a line of JSON (header), then
upstream's serialized function.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import AotBuildError
from . import CALL, TRAINING_GRAD, Built, Capabilities, FunctionRequest, Refused, Unloadable

#: File extension of a dynamo artifact.
SUFFIX = ".dynamo"
_MAGIC = b"AOTDYNAMO1\n"
#: Inductor options used unless the caller overrides them: kernels read the thread count at
#: run time (the loaded guard accepts any thread count, see :func:`load`).
DEFAULT_OPTIONS: dict[str, Any] = {"cpp.dynamic_threads": True}
#: The smallest size a dynamic dimension is compiled for (Dynamo specializes 0 and 1).
GENERIC_MIN = 2


class DynamoRuleError(AotBuildError):
    """Base class of this rule's errors."""


class DynamoBuildError(DynamoRuleError):
    """A function could not be compiled or saved."""


class DynamoLoadError(DynamoRuleError, Unloadable):
    """An artifact cannot be loaded here (no C++ compiler, other torch/Python, other CPU ISA,
    a global the function reads is missing, a damaged file)."""


class DynamoGuardError(DynamoRuleError, Refused):
    """A call is outside what the artifact was compiled for (a guard failed): other dtype,
    rank, size outside the dynamic range, weights of another shape, grad mode, ...; the
    caller should run the Python function instead."""


# ----------------------------------------------------------------------------- build side


def _dim_bounds(dim: Any) -> tuple[int, int | None] | None:
    """(min, max) for mark_dynamic from a torch.export ``Dim`` (None: a static dimension)."""
    if dim is None:
        return None
    kind = type(dim).__name__
    if kind == "_DimHint":
        text = str(dim)
        return None if "STATIC" in text else (GENERIC_MIN, None)
    if isinstance(dim, int):
        return None
    lo = getattr(dim, "min", None)
    hi = getattr(dim, "max", None)
    low = max(int(lo) if isinstance(lo, int) else 0, GENERIC_MIN)
    high: int | None = None
    try:
        if hi is not None and getattr(hi, "is_finite", True) is not False:
            high = int(hi)
    except (TypeError, ValueError, OverflowError):
        high = None
    if high is not None and high >= 2**62:
        high = None
    return (low, high)


def _copy_tensor(t: Any) -> Any:
    """A copy of an example tensor to mark (marks are attributes; the caller's are left alone)."""
    c = t.detach().clone()
    return c.requires_grad_(t.requires_grad) if t.is_floating_point() or t.is_complex() else c


def _mark(value: Any, spec: Any, where: str) -> Any:
    """``value`` with its dynamic dimensions marked per torch.export's ``spec``."""
    import torch

    if spec is None:
        return value
    if isinstance(value, torch.Tensor):
        if isinstance(spec, dict):
            items = list(spec.items())
        elif isinstance(spec, (tuple, list)):
            items = list(enumerate(spec))
        else:
            raise DynamoBuildError(f"{where}: dynamic_shapes entry {spec!r} is not a dict or tuple of Dims")
        out = _copy_tensor(value)
        for i, dim in items:
            bounds = _dim_bounds(dim)
            if bounds is None:
                continue
            lo, hi = bounds
            if not 0 <= int(i) < out.dim():
                raise DynamoBuildError(
                    f"{where}: dynamic_shapes names dimension {i} of a {out.dim()}-d tensor"
                )
            if out.shape[int(i)] < lo or (hi is not None and out.shape[int(i)] > hi):
                raise DynamoBuildError(
                    f"{where}: example size {out.shape[int(i)]} of dimension {i} is outside "
                    f"[{lo}, {hi}] (dynamic dimensions are compiled from {GENERIC_MIN} up)"
                )
            torch._dynamo.mark_dynamic(out, int(i), min=lo, max=hi)
        return out
    if isinstance(value, dict) and isinstance(spec, dict):
        return {k: _mark(v, spec.get(k), f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (tuple, list)) and isinstance(spec, (tuple, list)):
        if len(spec) != len(value):
            raise DynamoBuildError(f"{where}: dynamic_shapes has {len(spec)} entries for {len(value)} values")
        marked = [_mark(v, s, f"{where}[{i}]") for i, (v, s) in enumerate(zip(value, spec, strict=True))]
        return type(value)(marked) if isinstance(value, list) else tuple(marked)
    raise DynamoBuildError(f"{where}: dynamic_shapes entry {spec!r} does not match the value's structure")


def mark_dynamic_inputs(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], dynamic_shapes: Any
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Copies of ``args``/``kwargs`` whose tensors carry ``torch._dynamo.mark_dynamic`` marks
    for torch.export's ``dynamic_shapes`` (a dict by parameter name, or a tuple/list in
    argument order; per tensor a dict ``{dim: Dim}`` or a tuple with one Dim or None per
    dimension; ``Dim.AUTO``/``Dim.DYNAMIC`` are unbounded, ``Dim.STATIC`` static). Ranges
    start at :data:`GENERIC_MIN`."""
    import inspect

    if dynamic_shapes is None:
        return args, kwargs
    bound = inspect.signature(fn).bind(*args, **kwargs)
    names = list(bound.arguments)
    if isinstance(dynamic_shapes, dict):
        unknown = set(dynamic_shapes) - set(names)
        if unknown:
            raise DynamoBuildError(f"dynamic_shapes names {sorted(unknown)}, not arguments of {names}")
        specs = dict(dynamic_shapes)
    elif isinstance(dynamic_shapes, (tuple, list)):
        if len(dynamic_shapes) != len(names):
            raise DynamoBuildError(
                f"dynamic_shapes has {len(dynamic_shapes)} entries for {len(names)} arguments {names}"
            )
        specs = dict(zip(names, dynamic_shapes, strict=True))
    else:
        raise DynamoBuildError(f"dynamic_shapes must be a dict, tuple or list, not {type(dynamic_shapes)}")
    for name in names:
        bound.arguments[name] = _mark(bound.arguments[name], specs.get(name), f"argument {name!r}")
    return tuple(bound.args), dict(bound.kwargs)


def _keep_guards(entries: Any) -> list[bool]:
    """Keep every guard that can be saved, globals included (upstream's default drops every
    guard on a global, and with them any check on the weights). Dropped, as upstream does:
    identity guards (``ID_MATCH`` and kinds built on it: modules, builtins, functions,
    classes), which cannot be saved; a global *function* rebound after the build is therefore
    not noticed."""
    from torch._dynamo.guards import CheckFunctionManager

    unsupported = set(CheckFunctionManager.UNSUPPORTED_SERIALIZATION_GUARD_TYPES)
    return [
        not (entry.guard_type in unsupported or unsupported.intersection(entry.derived_guard_types or ()))
        for entry in entries
    ]


def _isa_name() -> str:
    """The vector ISA Inductor generates code for now (``avx2``; ``none``: scalar code)."""
    from torch._inductor import cpu_vec_isa

    isa = cpu_vec_isa.pick_vec_isa()
    return str(isa) if isa else "none"


def _external_names(compiled: Any, f_globals: dict[str, Any]) -> list[str]:
    """Globals the compiled code reads that must be read live, never stored: modules and
    tensors the function's module holds."""
    import torch

    used = compiled._artifacts.runtime_env.used_globals
    return sorted(
        name
        for name, value in used.items()
        if name in f_globals
        and f_globals[name] is value
        and isinstance(value, (torch.nn.Module, torch.Tensor))
    )


def build(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dynamic_shapes: Any,
    out_dir: Path,
    *,
    options: dict[str, Any] | None = None,
) -> Path:
    """Compile ``fn`` for ``(args, kwargs)`` with Dynamo+Inductor (``fullgraph=True``) and
    write ``out_dir/<sha256[:24]>.dynamo``; return its path. ``dynamic_shapes``: as
    torch.export takes it (see :func:`mark_dynamic_inputs`). ``options``: Inductor options
    (over :data:`DEFAULT_OPTIONS`). Raises DynamoBuildError."""
    import torch

    out_dir = Path(out_dir)
    f_globals: dict[str, Any] = getattr(fn, "__globals__", {})
    try:
        margs, mkwargs = mark_dynamic_inputs(fn, tuple(args), dict(kwargs), dynamic_shapes)
        inductor_options = {**DEFAULT_OPTIONS, **(options or {}), "guard_filter_fn": _keep_guards}
        with torch._dynamo.config.patch(skip_nnmodule_hook_guards=False):
            optimized: Any = torch.compile(fn, fullgraph=True, options=inductor_options)
            compiled = optimized.aot_compile((margs, mkwargs))
        externals = _external_names(compiled, f_globals)
        payload = compiled.serialize(compiled, {name: f_globals[name] for name in externals}).serialized_data
    except DynamoBuildError:
        raise
    except Exception as exc:
        raise DynamoBuildError(
            f"{getattr(fn, '__qualname__', fn)}: torch.compile(fullgraph=True).aot_compile failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    header = {
        "function": f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', '?')}",
        "globals": externals,
        "isa": _isa_name(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "grad": torch.is_grad_enabled(),
    }
    data = _MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n" + payload
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{hashlib.sha256(data).hexdigest()[:24]}{SUFFIX}"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


# ------------------------------------------------------------------------------ load side


def read_header(data: bytes) -> tuple[dict[str, Any], bytes]:
    """(header, upstream payload) of an artifact's bytes. Raises DynamoLoadError."""
    if not data.startswith(_MAGIC):
        raise DynamoLoadError("not a dynamo artifact (bad magic)")
    end = data.find(b"\n", len(_MAGIC))
    try:
        header = json.loads(data[len(_MAGIC) : end])
    except ValueError as exc:
        raise DynamoLoadError(f"damaged dynamo artifact header: {exc}") from exc
    return header, data[end + 1 :]


@contextlib.contextmanager
def _pinned_isa(name: str) -> Iterator[None]:
    """Inductor compiles for exactly the ISA the code was generated for (the host must have it)."""
    from torch._inductor import cpu_vec_isa

    host = cpu_vec_isa.valid_vec_isa_list()  # probes with the C++ compiler
    chosen = [isa for isa in host if str(isa) == name]
    if name != "none" and not chosen:
        raise DynamoLoadError(
            f"the artifact's kernels were generated for the {name} vector ISA; this CPU offers "
            f"{[str(i) for i in host] or 'none'}"
        )
    original = cpu_vec_isa.valid_vec_isa_list
    cpu_vec_isa.valid_vec_isa_list = lambda: chosen  # type: ignore[assignment]
    try:
        yield
    finally:
        cpu_vec_isa.valid_vec_isa_list = original  # type: ignore[assignment]


def _live_class() -> Any:
    """A subclass of upstream's AOTCompiledFunction whose guards see the live globals."""
    import builtins

    import torch
    from torch._dynamo.aot_compile import AOTCompiledFunction
    from torch._dynamo.guards import _Missing
    from torch._dynamo.package import load_guard_manager, load_guards_state

    class LiveAOTCompiledFunction(AOTCompiledFunction):  # type: ignore[misc]
        def __post_init__(self) -> None:
            art = self._artifacts
            art.check_compatibility()
            self.fn = art.runtime_env.forward_callable(
                art.backend_id, art.compiled_fn, extra_globals=self._extra_globals
            )
            state = load_guards_state(art.guards_state)
            graph_state = state.output_graph
            scope = graph_state.global_scope
            for name, value in list(scope.items()):
                if isinstance(value, _Missing) and name in self.fn.__globals__:
                    scope[name] = self.fn.__globals__[name]
            bname = graph_state.name_of_builtins_dict_key_in_fglobals
            if bname:
                self.fn.__globals__.setdefault(bname, builtins.__dict__)
            self.global_state_guard = graph_state.global_state_guard
            self.threads = -1
            self.follow_threads()
            # guards on (empty) module hooks are built only with this off: hooks added later
            # must fail the guard, not be ignored
            with torch._dynamo.config.patch(skip_nnmodule_hook_guards=False):
                art.guard_manager = load_guard_manager(state, art.original_code, self.fn.__globals__)

        def follow_threads(self) -> None:
            """Make the global-state guard expect this process's current thread count."""
            threads = torch.get_num_threads()
            gsg = self.global_state_guard
            if gsg is not None and threads != self.threads:
                st = json.loads(gsg.__getstate__())
                if "num_threads" in st:  # keys must all stay: a missing one aborts the process
                    st["num_threads"] = threads
                    gsg.__setstate__(json.dumps(st))
                self.threads = threads

    return LiveAOTCompiledFunction


class LoadedFunction:
    """A loaded artifact: call it with the function's own arguments.

    Each call re-reads the globals the code uses from the function's module, checks the
    guards (raising :class:`DynamoGuardError` when one fails), then runs the compiled code.
    """

    def __init__(self, compiled: Any, live: dict[str, Any], names: list[str], header: dict[str, Any]):
        self._compiled = compiled
        self._call: Callable[..., Any] = compiled.fn
        self._scope: dict[str, Any] = compiled.fn.__globals__
        self._live = live
        self._names = names
        self.header = header
        import torch

        self._threads: Callable[[], int] = torch.get_num_threads
        self._grad_enabled: Callable[[], bool] = torch.is_grad_enabled
        self._tensor = torch.Tensor
        #: built under no_grad: an argument's requires_grad is irrelevant to a no_grad call
        #: (nothing is recorded), so such arguments are passed detached instead of failing the
        #: guard on requires_grad. Weights are not: their requires_grad stays guarded.
        self._inference = header.get("grad") is False
        self.__wrapped__ = compiled

    def _detached(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        tensor = self._tensor

        def d(v: Any) -> Any:
            return v.detach() if isinstance(v, tensor) and v.requires_grad else v

        return tuple(d(a) for a in args), {k: d(v) for k, v in kwargs.items()}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        scope, live = self._scope, self._live
        if self._inference and not self._grad_enabled():
            args, kwargs = self._detached(args, kwargs)
        try:
            for name in self._names:
                scope[name] = live[name]
        except KeyError as exc:
            raise DynamoGuardError(f"global {exc.args[0]!r} the compiled code reads is gone") from None
        if self._threads() != self._compiled.threads:
            self._compiled.follow_threads()
        try:
            ok = self._compiled.guard_check(*args, **kwargs)
        except TypeError:
            raise
        except Exception as exc:
            raise DynamoGuardError(f"guard check failed: {type(exc).__name__}: {exc}") from exc
        if not ok:
            reason = self._compiled._artifacts.guard_manager.check_verbose(
                self._compiled.prepare_f_locals(*args, **kwargs)
            )
            raise DynamoGuardError(f"call outside what was compiled: {list(reason.verbose_code_parts)}")
        return self._call(*args, **kwargs)


def load(path: Path, fn: Callable[..., Any]) -> Callable[..., Any]:
    """Load the artifact at ``path`` for ``fn`` (the Python function it was built from, whose
    module globals it reads live). Compiles the artifact's C++ (Inductor's cache dir; nothing
    is written next to ``path``). Raises DynamoLoadError when it cannot load here."""
    import torch

    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DynamoLoadError(f"{path}: cannot read: {exc}") from exc
    header, payload = read_header(data)
    where = f"{path.name} ({header.get('function', '?')})"
    if header.get("torch") != torch.__version__ or header.get("python") != platform.python_version():
        raise DynamoLoadError(
            f"{where}: built with torch {header.get('torch')} / Python {header.get('python')}, "
            f"this is torch {torch.__version__} / Python {platform.python_version()}"
        )
    live: dict[str, Any] = getattr(fn, "__globals__", None) or {}
    names: list[str] = list(header.get("globals", []))
    missing = [n for n in names if n not in live]
    if missing:
        raise DynamoLoadError(f"{where}: {fn!r}'s module has no global(s) {missing} the code reads")
    try:
        with _pinned_isa(str(header.get("isa", "none"))):
            compiled = _live_class().deserialize(payload, live, {n: live[n] for n in names})
    except DynamoLoadError as exc:
        raise DynamoLoadError(f"{where}: {exc}") from exc
    except Exception as exc:
        hint = ""
        if "CxxCompiler" in type(exc).__name__ or "CxxCompiler" in str(exc):
            hint = " (loading compiles the artifact's C++ source: it needs a C++ compiler on PATH or CXX)"
        raise DynamoLoadError(f"{where}: cannot load: {type(exc).__name__}: {exc}{hint}") from exc
    used = set(compiled._artifacts.runtime_env.used_globals) | set(names)
    refresh = sorted(n for n in used if n in live and not n.startswith("__"))
    return LoadedFunction(compiled, live, refresh, header)


# --------------------------------------------------------------------------- the backend


def _isa_label(name: str) -> str:
    """``avx2`` -> ``AVX2``; ``none`` -> scalar (the aoti rule's spelling)."""
    return "scalar (no vector ISA)" if name in ("none", "") else name.upper().replace(" ", "+")


class DynamoBackend:
    """``dynamo`` (:data:`CALL` convention): the entry's Python function compiled by
    ``torch.compile(fullgraph=True).aot_compile`` in the build process; one ``.dynamo`` file
    per target holding Dynamo's bytecode, guards and Inductor's C++/Python *source*. Loading
    compiles that C++ (a C++ compiler is needed at run time, seconds per artifact on an empty
    Inductor cache); weights are read live from the function's module (plain functions) or
    from ``self`` (method entries). A call outside the guards raises
    :class:`DynamoGuardError` (a :class:`~aot_build.backends.Refused`) before computing."""

    name = "dynamo"
    version = "1"
    convention = CALL
    # a compiler builds Inductor's kernels (and loads them again at run time); the file
    # holds source, not native code
    capabilities = Capabilities(
        devices=frozenset({"cpu"}),
        needs_compiler=True,
        in_process=True,
        cacheable=False,
        native=False,
        training=TRAINING_GRAD,
    )

    def compile(self, request: FunctionRequest) -> Built:
        import torch

        from ..targets import compile_options  # build side only: the shim imports this module
        from .aoti.isa import pinned_vec_isa, small_loops_serial

        fn = request.function
        if fn is None:
            raise DynamoBuildError("the dynamo rule compiles the entry's Python function; none was given")
        if request.target.device != "cpu":
            raise DynamoBuildError(
                f"the dynamo rule builds CPU targets only, not {request.target.name} (use the aoti rule)"
            )
        # the target's ISA pins and thread options win over the project's inductor-options;
        # no C++ compiler is called here: nothing compiled at build time is shipped (the
        # file holds source)
        options = {**DEFAULT_OPTIONS, **request.config.inductor_options, **compile_options(request.target)}
        grad_mode = torch.enable_grad() if request.grad else torch.no_grad()
        with pinned_vec_isa(request.target), small_loops_serial(), grad_mode:
            path = build(
                fn, tuple(request.args), {}, request.dynamic_shapes, request.out_dir, options=options
            )
        data = path.read_bytes()
        header, _ = read_header(data)
        return Built(
            path=path,
            sha256=hashlib.sha256(data).hexdigest(),
            size=len(data),
            isa=_isa_label(str(header.get("isa", "none"))),
        )

    def load(self, path: Path, device: str, function: Callable[..., Any]) -> Callable[..., Any]:
        # device: the guards check every tensor's device, so nothing to choose here
        return load(path, function)
