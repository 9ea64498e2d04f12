"""Deprecated: :mod:`aot_build.backends.dynamo` (``DynamoRule`` is ``DynamoBackend``)."""

from __future__ import annotations

import warnings

from ..backends.dynamo import (
    DynamoBackend,
    DynamoBuildError,
    DynamoGuardError,
    DynamoLoadError,
    DynamoRuleError,
    build,
    load,
    read_header,
)

warnings.warn(
    "aot_build.rules.dynamo is deprecated: import aot_build.backends.dynamo",
    DeprecationWarning,
    stacklevel=2,
)

DynamoRule = DynamoBackend

__all__ = [
    "DynamoBackend",
    "DynamoBuildError",
    "DynamoGuardError",
    "DynamoLoadError",
    "DynamoRule",
    "DynamoRuleError",
    "build",
    "load",
    "read_header",
]
