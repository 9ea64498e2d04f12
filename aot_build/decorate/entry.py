"""The ``@aot_entry`` decorator and the callable it returns.

Decorating does no compiling and builds no tensors: it records the function in a registry
(for the build's discovery step) and looks the function up in its package's manifest (for
the shim). The artifact itself is loaded on the first call.
"""

from __future__ import annotations

import functools
import inspect
import threading
import types
from collections.abc import Callable
from typing import Any, TypeVar, overload

from ..errors import EntryError

F = TypeVar("F", bound=Callable[..., Any])

ExampleInputs = tuple[Any, ...] | Callable[[], tuple[Any, ...]]

_REGISTRY: dict[str, AotEntry] = {}
_REGISTRY_LOCK = threading.Lock()


class AotEntry:
    """A function compiled ahead of time, callable exactly like the original.

    Args:
        fn: the module-level Python function. Kept as ``__wrapped__``; it runs whenever no
            artifact fits a call.
        example_inputs: a tuple of positional arguments, or a zero-argument callable
            returning one (so that importing the package builds no tensors). The build
            compiles the function for exactly these shapes, dtypes and plain values.
    """

    __wrapped__: Callable[..., Any]

    def __init__(self, fn: Callable[..., Any], example_inputs: ExampleInputs) -> None:
        where = _describe(fn)
        if not isinstance(fn, types.FunctionType):
            raise EntryError(
                f"@aot_entry on {where}: expected a plain Python function, got "
                f"{type(fn).__name__}; decorate the function itself (innermost decorator)"
            )
        if "<locals>" in fn.__qualname__ or "<lambda>" in fn.__qualname__:
            raise EntryError(
                f"@aot_entry on {where}: only module-level functions can be entries (the "
                "build finds entries by importing their module); move it to module level"
            )
        if not (isinstance(example_inputs, tuple) or callable(example_inputs)):
            raise EntryError(
                f"@aot_entry on {where}: example_inputs must be a tuple of positional "
                f"arguments or a zero-argument callable returning one, got "
                f"{type(example_inputs).__name__}; write example_inputs=(tensor,) for one input"
            )
        functools.update_wrapper(self, fn)
        self._example_inputs = example_inputs
        self._lock = threading.Lock()
        # Set on first call by the shim: a bound artifact set, or None for plain Python.
        self._call: Callable[..., Any] | None = None
        with _REGISTRY_LOCK:
            _REGISTRY[self.key] = self

    @property
    def key(self) -> str:
        """``module:qualname``, the entry's name in manifests and messages."""
        return f"{self.__wrapped__.__module__}:{self.__wrapped__.__qualname__}"

    @property
    def source(self) -> str:
        """``file:line`` of the function's definition."""
        code = self.__wrapped__.__code__
        return f"{code.co_filename}:{code.co_firstlineno}"

    def example_inputs(self) -> tuple[Any, ...]:
        """The example arguments, built now if they were given as a callable."""
        value = self._example_inputs
        if callable(value):
            try:
                value = value()
            except Exception as exc:
                raise EntryError(
                    f"{self.key} ({self.source}): example_inputs() raised "
                    f"{type(exc).__name__}: {exc}; fix the callable so it returns a tuple"
                ) from exc
        if not isinstance(value, tuple):
            raise EntryError(
                f"{self.key} ({self.source}): example_inputs must give a tuple of positional "
                f"arguments, got {type(value).__name__}; wrap a single input as (x,)"
            )
        return value

    def loaded_target(self) -> str | None:
        """The target whose artifact serves CPU calls in this process (e.g. ``cpu-avx2``),
        or None when calls run as plain Python (no manifest, no fitting artifact)."""
        call = self._call if self._call is not None else self._bind()
        target = getattr(call, "cpu_target", None)
        return target() if target is not None else None

    def __set_name__(self, owner: type, name: str) -> None:
        raise EntryError(
            f"@aot_entry on method {owner.__qualname__}.{name} ({self.source}): entries on "
            "methods are not supported yet; call a module-level @aot_entry function from "
            "the method instead"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call = self._call
        if call is None:
            call = self._bind()
        return call(*args, **kwargs)

    def _bind(self) -> Callable[..., Any]:
        from ..load.shim import bind  # the run-side half; imports torch

        with self._lock:
            if self._call is None:
                self._call = bind(self)
            return self._call

    def __repr__(self) -> str:
        return f"<aot_entry {self.key}>"


@overload
def aot_entry(fn: F, *, example_inputs: ExampleInputs) -> F: ...
@overload
def aot_entry(*, example_inputs: ExampleInputs) -> Callable[[F], F]: ...
def aot_entry(fn: Any = None, *, example_inputs: ExampleInputs) -> Any:
    """Mark a module-level function for ahead-of-time compiling.

    Args:
        fn: the function (when used without parentheses-call syntax).
        example_inputs: a tuple of positional arguments, or a zero-argument callable that
            returns one. Tensors fix the compiled shapes and dtypes; other values are baked in.

    Returns:
        An :class:`AotEntry` that calls the compiled artifact when one fits the call, and the
        original function (``__wrapped__``) otherwise.
    """

    def wrap(f: Callable[..., Any]) -> AotEntry:
        return AotEntry(f, example_inputs)

    return wrap if fn is None else wrap(fn)


def registered_entries(prefix: str = "") -> list[AotEntry]:
    """Every entry decorated so far whose module is ``prefix`` or below it."""
    with _REGISTRY_LOCK:
        entries = list(_REGISTRY.values())
    return [
        e
        for e in entries
        if not prefix
        or e.__wrapped__.__module__ == prefix
        or e.__wrapped__.__module__.startswith(prefix + ".")
    ]


def _describe(fn: Any) -> str:
    name = getattr(fn, "__qualname__", repr(fn))
    module = getattr(fn, "__module__", "?")
    try:
        line = inspect.getsourcelines(fn)[1]
        return f"{module}:{name} ({inspect.getsourcefile(fn)}:{line})"
    except (OSError, TypeError):
        return f"{module}:{name}"
