"""The ``@aot_entry`` decorator and the callable it returns.

Decorating does no compiling and builds no tensors: it records the function in a registry
(for the build's discovery step). The shim binds the entry to its package's manifest on the
first call.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, overload

from .. import collector
from ..errors import EntryError
from ..names import in_package
from .calls import CallSignature

F = TypeVar("F", bound=Callable[..., Any])

#: One set of positional arguments, several sets, or a zero-argument callable giving either.
ExampleInputs = tuple[Any, ...] | list[tuple[Any, ...]] | Callable[[], Any]

_REGISTRY: dict[str, AotEntry] = {}
_REGISTRY_LOCK = threading.Lock()


def _is_compiling() -> bool:
    """torch.compiler.is_compiling, imported on first use (importing aot_build must not
    import torch); the global is then rebound so later calls go straight to torch's."""
    global _is_compiling
    from torch.compiler import is_compiling

    _is_compiling = is_compiling
    return is_compiling()


class AotEntry:
    """A function compiled ahead of time, callable exactly like the original.

    Args:
        fn: a module-level function, or a method of an ``nn.Module`` subclass. Kept as
            ``__wrapped__``; it runs whenever no artifact fits a call.
        example_inputs: one tuple of positional arguments, a list of such tuples (one
            compiled variant each), or a zero-argument callable returning either (so that
            importing the package builds no tensors). For a method the tuple starts with
            the instance (``self``).
        dynamic_shapes: torch.export's ``dynamic_shapes`` for the example set (one per set
            for a list), with ``None`` in ``self``'s place for a method; or a zero-argument
            callable returning it (``torch.export.Dim`` imports sympy, ~0.4 s: a callable
            keeps that out of your package's import).
        backend: the compile backend (``aoti``, ``dynamo``, or one installed in the
            ``aot_build.backends`` entry point group); None: the project's ``backend`` setting.
        backward: also compile the backward pass, so that calls with grad enabled run
            compiled and gradients flow to the inputs and weights.
    """

    __wrapped__: Callable[..., Any]

    def __init__(
        self,
        fn: Callable[..., Any],
        example_inputs: ExampleInputs,
        dynamic_shapes: Any = None,
        backend: str | None = None,
        backward: bool = False,
    ) -> None:
        where = _describe(fn)
        if backend is not None and (not isinstance(backend, str) or not backend):
            raise EntryError(
                f"@aot_entry on {where}: backend must be a compile backend's name "
                f'(e.g. backend="aoti"), got {backend!r}'
            )
        if not isinstance(backward, bool):
            raise EntryError(f"@aot_entry on {where}: backward must be True or False, got {backward!r}")
        if not isinstance(fn, types.FunctionType):
            raise EntryError(
                f"@aot_entry on {where}: expected a plain Python function, got "
                f"{type(fn).__name__}; decorate the function itself (innermost decorator)"
            )
        if "<locals>" in fn.__qualname__ or "<lambda>" in fn.__qualname__:
            raise EntryError(
                f"@aot_entry on {where}: only module-level functions and methods of module-level "
                "classes can be entries (the build finds entries by importing their module); "
                "move it to module level"
            )
        if not (isinstance(example_inputs, (tuple, list)) or callable(example_inputs)):
            raise EntryError(
                f"@aot_entry on {where}: example_inputs must be a tuple of positional "
                f"arguments, a list of such tuples, or a zero-argument callable returning "
                f"either, got {type(example_inputs).__name__}; write example_inputs=(tensor,) "
                "for one input"
            )
        functools.update_wrapper(self, fn)
        #: Turns a call's arguments into one canonical tuple (one value per parameter).
        self.call_signature = CallSignature(fn, where)
        self._example_inputs = example_inputs
        self._dynamic_shapes = dynamic_shapes
        self.backend = backend
        self.backward = backward
        self._lock = threading.Lock()
        #: The class a method entry belongs to (set by ``__set_name__``); None for functions.
        self.owner: type | None = None
        # Set on first call by the shim: a bound artifact set, or the plain function.
        self._call: Callable[..., Any] | None = None
        with _REGISTRY_LOCK:
            old = _REGISTRY.get(self.key)
            # Two definitions in one module's namespace would share the name under which the
            # manifest stores artifacts (one would serve the other's calls). The same line
            # again is a reload; another namespace is the module imported afresh.
            if (
                old is not None
                and old.__wrapped__.__globals__ is fn.__globals__
                and old.__wrapped__.__code__.co_firstlineno != fn.__code__.co_firstlineno
            ):
                raise EntryError(
                    f"@aot_entry on {where}: another entry has the same name {self.key} "
                    f"({old.source}); entries are named module:qualname in the wheel's manifest. "
                    "Rename one of them"
                )
            _REGISTRY[self.key] = self

    @property
    def rule(self) -> str | None:
        """Deprecated alias of :attr:`backend` (aot-build 0.4.0)."""
        return self.backend

    @property
    def key(self) -> str:
        """``module:qualname``, the entry's name in manifests and messages."""
        return f"{self.__wrapped__.__module__}:{self.__wrapped__.__qualname__}"

    @property
    def source(self) -> str:
        """``file:line`` of the function's definition."""
        code = self.__wrapped__.__code__
        return f"{code.co_filename}:{code.co_firstlineno}"

    @property
    def is_method(self) -> bool:
        """Whether calls pass the instance first (``self``): a function defined in a class,
        unless the class holds it as a ``@staticmethod`` (called as a plain function)."""
        return "." in self.__wrapped__.__qualname__ and self.class_wrapper() is not staticmethod

    def class_wrapper(self) -> type | None:
        """``staticmethod`` or ``classmethod`` where the class that defines the entry holds it
        wrapped in one (``@staticmethod`` over ``@aot_entry``: no ``__set_name__`` reaches the
        entry then); None for a function, a method, or a class not found (yet)."""
        if self.owner is not None:
            return None
        fn = self.__wrapped__
        *outer, name = fn.__qualname__.split(".")
        if not outer:
            return None
        found: Any = fn.__globals__.get(outer[0])  # the module's namespace
        for part in outer[1:]:
            found = getattr(found, part, None)
        held = vars(found).get(name) if isinstance(found, type) else None
        if isinstance(held, (staticmethod, classmethod)) and held.__func__ is self:
            return type(held)
        return None

    def example_sets(self) -> list[tuple[Any, ...]]:
        """The example-input sets (positional tuples), built now if given as a callable."""
        return self._examples()[0]

    def _examples(self) -> tuple[list[tuple[Any, ...]], bool]:
        """The sets, and whether they were given as a list. EntryError names the fix."""
        value = self._example_inputs
        if callable(value) and not isinstance(value, (tuple, list)):
            try:
                value = value()
            except Exception as exc:
                raise EntryError(
                    f"{self.key} ({self.source}): example_inputs() raised "
                    f"{type(exc).__name__}: {exc}; fix the callable so it returns a tuple "
                    "of arguments or a list of such tuples"
                ) from exc
        if isinstance(value, tuple):
            return [value], False
        if isinstance(value, list) and value and all(isinstance(s, tuple) for s in value):
            return list(value), True
        raise EntryError(
            f"{self.key} ({self.source}): example_inputs must give a tuple of positional "
            f"arguments or a non-empty list of such tuples, got {type(value).__name__}; "
            "wrap a single input as (x,)"
        )

    def input_sets(self) -> list[tuple[tuple[Any, ...], Any]]:
        """Each example-input set with its ``dynamic_shapes`` (or None)."""
        sets, several = self._examples()
        spec = self._dynamic_shapes
        if callable(spec):
            try:
                spec = spec()
            except Exception as exc:
                raise EntryError(
                    f"{self.key} ({self.source}): dynamic_shapes() raised {type(exc).__name__}: {exc}"
                ) from exc
        if not several:  # one tuple: dynamic_shapes describes it, in any form export takes
            return [(sets[0], spec)]
        if spec is None:
            return [(s, None) for s in sets]
        if not isinstance(spec, list) or len(spec) != len(sets):
            raise EntryError(
                f"{self.key} ({self.source}): example_inputs has {len(sets)} input sets, so "
                "dynamic_shapes must be a list with one entry (or None) per set, got "
                f"{type(spec).__name__}" + (f" of length {len(spec)}" if isinstance(spec, list) else "")
            )
        return list(zip(sets, spec, strict=True))

    def loaded_target(self) -> str | None:
        """The target whose artifact serves CPU calls in this process (e.g. ``cpu-avx2``),
        or None when calls run as plain Python (no manifest, no fitting artifact)."""
        call = self._call if self._call is not None else self._bind()
        target = getattr(call, "cpu_target", None)
        return target() if target is not None else None

    def __set_name__(self, owner: type, name: str) -> None:
        torch = sys.modules.get("torch")
        module_base = getattr(getattr(torch, "nn", None), "Module", None)
        if module_base is None or not issubclass(owner, module_base):
            raise EntryError(
                f"@aot_entry on method {owner.__qualname__}.{name} ({self.source}): methods can be "
                "entries only in torch.nn.Module subclasses (the artifact computes with the "
                "instance's parameters and buffers); make the class an nn.Module, or call a "
                "module-level @aot_entry function from the method"
            )
        if "<locals>" in owner.__qualname__:
            raise EntryError(
                f"@aot_entry on method {owner.__qualname__}.{name} ({self.source}): the class is "
                "defined inside a function; define it at module level"
            )
        self.owner = owner

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        if _is_compiling():  # the caller is being traced: the method is plain code to it (a
            return functools.partial(self.__wrapped__, instance)  # method object Dynamo cannot call)
        return types.MethodType(self, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _is_compiling():  # the caller is being traced: the entry is plain code to it
            return self.__wrapped__(*args, **kwargs)
        call = self._call
        if call is None:
            call = self._bind()
        return call(*args, **kwargs)

    def _bind(self) -> Callable[..., Any]:
        with self._lock:
            if self._call is None:
                with collector.paused():  # the shim's modules, the entry's record
                    from ..load.shim import bind  # the run-side half; imports torch

                    self._call = bind(self)
            return self._call

    def __repr__(self) -> str:
        return f"<aot_entry {self.key}>"


@overload
def aot_entry(
    fn: F,
    *,
    example_inputs: ExampleInputs,
    dynamic_shapes: Any = None,
    backend: str | None = None,
    backward: bool = False,
    rule: str | None = None,
) -> F: ...
@overload
def aot_entry(
    *,
    example_inputs: ExampleInputs,
    dynamic_shapes: Any = None,
    backend: str | None = None,
    backward: bool = False,
    rule: str | None = None,
) -> Callable[[F], F]: ...
def aot_entry(
    fn: Any = None,
    *,
    example_inputs: ExampleInputs,
    dynamic_shapes: Any = None,
    backend: str | None = None,
    backward: bool = False,
    rule: str | None = None,
) -> Any:
    """Mark a module-level function, or a method of an ``nn.Module`` subclass, for
    ahead-of-time compiling.

    Args:
        fn: the function (when used without parentheses-call syntax).
        example_inputs: a tuple of positional arguments, a list of such tuples, or a
            zero-argument callable returning either. Tensors fix dtypes and (unless
            ``dynamic_shapes`` says otherwise) shapes; plain values are baked in. For a
            method, each tuple starts with an instance of the class.
        dynamic_shapes: torch.export's spelling of dynamic dimensions, per argument:
            ``{0: Dim("batch", min=1, max=64)}`` or a tuple per dimension; ``None`` for
            static arguments (and for ``self``). A list with one per input set when
            ``example_inputs`` is a list. May be a zero-argument callable returning it.
        backend: the compile backend for this entry (``aoti``, ``dynamo``, or an installed
            third-party backend); None: ``[tool.aot-build] backend`` (default ``aoti``).
        backward: compile the backward pass too: calls with grad enabled run compiled and
            ``.backward()`` gives gradients for the inputs and the weights the entry reads.
        rule: deprecated spelling of ``backend`` (a DeprecationWarning; giving both is an error).

    Returns:
        An :class:`AotEntry` that calls the compiled artifact when one fits the call, and the
        original function (``__wrapped__``) otherwise.
    """

    if rule is not None:
        if backend is not None:
            raise EntryError(
                f"@aot_entry at {_call_site()}: both backend={backend!r} and rule={rule!r} are "
                "given; rule is the deprecated spelling of backend: keep only backend"
            )
        warnings.warn(
            f"@aot_entry(rule=...) is deprecated: write backend={rule!r}",
            DeprecationWarning,
            stacklevel=2,
        )
        backend = rule

    def wrap(f: Callable[..., Any]) -> AotEntry:
        return AotEntry(f, example_inputs, dynamic_shapes, backend, backward)

    return wrap if fn is None else wrap(fn)


def registered_entries(prefix: str = "") -> list[AotEntry]:
    """Every entry decorated so far whose module is ``prefix`` or below it."""
    with _REGISTRY_LOCK:
        entries = list(_REGISTRY.values())
    return [e for e in entries if not prefix or in_package(e.__wrapped__.__module__, prefix)]


def _describe(fn: Any) -> str:
    """``module:qualname (file:line)`` of what is being decorated; for an object without
    source (a builtin, a partial) the line that decorates it."""
    name = getattr(fn, "__qualname__", None) or repr(fn)
    module = getattr(fn, "__module__", "?")
    try:
        line = inspect.getsourcelines(fn)[1]
        return f"{module}:{name} ({inspect.getsourcefile(fn)}:{line})"
    except (OSError, TypeError):
        return f"{module}:{name} (decorated at {_call_site()})"


def _call_site() -> str:
    """``file:line`` of the innermost frame outside aot_build: where @aot_entry was applied."""
    here = os.path.dirname(os.path.dirname(__file__))
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(here):
        frame = frame.f_back  # type: ignore[assignment]
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"
