"""Exceptions raised by aot_build. Every message names the object at fault and the fix."""

from __future__ import annotations

import traceback


class AotBuildError(Exception):
    """Base class of every error aot_build raises on purpose."""


class ConfigError(AotBuildError):
    """``[tool.aot-build]`` in pyproject.toml (or an override of it) is invalid."""


class EntryError(AotBuildError):
    """An ``@aot_entry`` is used wrongly (bad arguments, unsupported place)."""


class CompileError(AotBuildError):
    """An entry could not be compiled during the build."""


class ManifestError(AotBuildError):
    """A manifest is missing, damaged, or of a format this aot_build does not read."""


class FallbackError(AotBuildError):
    """Raised instead of falling back to eager Python when ``AOT_BUILD_STRICT=1``."""


class FallbackWarning(UserWarning):
    """An entry ran as plain Python because no shipped artifact fits; says which and why."""


def compile_failure(where: str, what: str, exc: BaseException, fix: str) -> CompileError:
    """A build step's failure: the traceback, then the exception's own explanation (torch.export's
    constraint messages and suggested fixes included), then the fix."""
    tb = "".join(traceback.format_exception(exc))
    lines = [ln for ln in str(exc).strip().splitlines() if not ln.startswith("The error above occurred")]
    text = "\n    ".join(lines[:40]) or ""
    return CompileError(f"{tb}\n{where}: {what}: {type(exc).__name__}: {text}\n  {fix}")
