"""An entry's calling convention: every call, and every example-input set, is matched to the
function's signature (``inspect.Signature.bind`` semantics, defaults applied) and becomes one
canonical tuple with a value per parameter, in signature order. ``f(x)``, ``f(x, None)`` and
``f(x, mask=None)`` are then the same call. (*Binding*, in aot_build, is the shim's: an entry
bound to its manifest.)"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from operator import is_
from typing import Any

from ..errors import EntryError

_REQUIRED = inspect.Parameter.empty
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


class CallSignature:
    """Turns calls of one function into canonical tuples.

    Args:
        fn: the entry's Python function.
        where: names it in errors (``module:qualname (file:line)``).
    """

    def __init__(self, fn: Callable[..., Any], where: str) -> None:
        self.fn = fn
        self._read(where)

    def _read(self, where: str = "") -> None:
        """Read the signature now, with the defaults the function has now."""
        fn = self.fn
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        variadic = [p for p in params if p.kind in _VARIADIC]
        if variadic:
            stars = ", ".join(("*" if p.kind == p.VAR_POSITIONAL else "**") + p.name for p in variadic)
            raise EntryError(
                f"@aot_entry on {where}: the function takes {stars}; an artifact serves a fixed "
                "set of parameters. Name every parameter (give optional ones a default)"
            )
        self.names = tuple(p.name for p in params)
        self.defaults = tuple(p.default for p in params)
        self._n_positional = sum(p.kind != p.KEYWORD_ONLY for p in params)
        # first index from which every parameter has a default: f(x) fills them in
        first = len(params)
        while first > 0 and self.defaults[first - 1] is not _REQUIRED:
            first -= 1
        self._first_default = first
        # what the defaults were read from: a call checks they are still the function's
        self._pos_defaults = getattr(fn, "__defaults__", None)
        kw = getattr(fn, "__kwdefaults__", None)
        self._kw_defaults = kw
        self._kw_keys = tuple(kw) if kw else ()
        self._kw_values = tuple(kw.values()) if kw else ()

    def _defaults_changed(self) -> bool:
        """``fn.__defaults__`` or ``__kwdefaults__`` set (or changed in place) since read. On
        every call: identity tests only, in C (``map(is_, ...)``), no Python frame per item."""
        fn = self.fn
        if getattr(fn, "__defaults__", None) is not self._pos_defaults:
            return True
        kw = getattr(fn, "__kwdefaults__", None)
        if kw is not self._kw_defaults:
            return True
        if kw is None:
            return False
        return (
            len(kw) != len(self._kw_keys)
            or not all(map(is_, kw, self._kw_keys))
            or not all(map(is_, kw.values(), self._kw_values))
        )

    def canonical(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
        """The canonical tuple of a call, or None when the call does not fit the signature
        (the Python function then runs and raises its own TypeError). Defaults are the ones the
        function has now: a default set after import is the call's value (and a compiled
        variant for another value does not fit it)."""
        if self._defaults_changed():
            self._read()
        n = len(args)
        if not kwargs and n <= self._n_positional:
            if n == len(self.names):
                return args
            if self._first_default <= n < len(self.names):
                return args + self.defaults[n:]
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return None
        bound.apply_defaults()
        return tuple(bound.arguments[name] for name in self.names)

    def canonical_example(self, example: tuple[Any, ...], where: str) -> tuple[Any, ...]:
        """An example-input tuple (positional arguments) as a canonical tuple."""
        canonical = self.canonical(example, {})
        if canonical is None:
            raise EntryError(
                f"{where}: example_inputs gives {len(example)} positional value(s), but the "
                f"function's parameters are ({', '.join(self.names)}); give one value per "
                "parameter, in order (parameters with defaults may be left out at the end)"
            )
        return canonical
