"""Deprecated: :mod:`aot_build.backends.aoti` (``AotiRule`` is ``AotiBackend``)."""

from __future__ import annotations

import warnings

from ..backends.aoti import AotiBackend, compile_library

warnings.warn(
    "aot_build.rules.aoti is deprecated: import aot_build.backends.aoti", DeprecationWarning, stacklevel=2
)

AotiRule = AotiBackend

__all__ = ["AotiBackend", "AotiRule", "compile_library"]
