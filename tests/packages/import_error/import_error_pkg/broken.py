"""Imports a dependency that is not installed (as if it were missing from requires)."""

import aot_build_missing_dependency_xyz  # noqa: F401
