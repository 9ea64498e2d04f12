"""Deprecated: the compile rules are :mod:`aot_build.backends` now; this module re-exports
them under their old names for code written against it."""

from __future__ import annotations

import warnings

from ..backends import (
    BUILTIN,
    CALL,
    ENTRY_POINT_GROUP,
    FLAT,
    Backend,
    Built,
    Capabilities,
    FunctionRequest,
    ProgramRequest,
    Refused,
    UnknownBackend,
    Unloadable,
    available,
    find,
)

warnings.warn(
    "aot_build.rules is deprecated: import aot_build.backends (Rule is Backend, UnknownRule is "
    "UnknownBackend, CompileRequest is ProgramRequest or FunctionRequest)",
    DeprecationWarning,
    stacklevel=2,
)

#: Deprecated names of :class:`aot_build.backends.Backend` and its lookup error.
Rule = Backend
UnknownRule = UnknownBackend
#: Deprecated: what ``compile`` is given (:class:`ProgramRequest` or :class:`FunctionRequest`).
CompileRequest = ProgramRequest | FunctionRequest

__all__ = [
    "BUILTIN",
    "CALL",
    "ENTRY_POINT_GROUP",
    "FLAT",
    "Backend",
    "Built",
    "Capabilities",
    "CompileRequest",
    "FunctionRequest",
    "ProgramRequest",
    "Refused",
    "Rule",
    "UnknownBackend",
    "UnknownRule",
    "Unloadable",
    "available",
    "find",
]
