"""Dotted names: the top-level package of a module, the package that holds its artifacts,
whether a module belongs to a package, and ``module:qualname`` references to classes and
functions that a manifest names and the shim resolves again by importing. One helper per
idea, used by every step of the pipeline."""

from __future__ import annotations

import importlib
import sys
from typing import Any


def top_package(module: str) -> str:
    """``"pkg"`` for ``"pkg.sub.mod"``."""
    return module.partition(".")[0]


def package_root(module: str) -> str:
    """The package whose ``_aot_build`` folder holds ``module``'s artifacts: the outermost
    imported regular package (one with an ``__init__.py``) among ``module``'s parents.

    Namespace packages are skipped: several distributions share them (``ns.a`` and ``ns.b``
    from two wheels), so a manifest there would be overwritten by the next install. Falls back
    to the top-level name when nothing is imported (messages, tests)."""
    parts = module.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        mod = sys.modules.get(name)
        if mod is not None and hasattr(mod, "__path__") and getattr(mod, "__file__", None) is not None:
            return name
    return top_package(module)


def in_package(module: str, package: str) -> bool:
    """True when ``module`` is ``package`` or one of its submodules."""
    return module == package or module.startswith(package + ".")


def qualified_name(obj: Any) -> str | None:
    """``module:qualname`` of a class or function that can be found again by importing
    ``module`` and following ``qualname``; None for local objects (lambdas, closures)."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    return f"{module}:{qualname}"


def class_ref(cls: type) -> str | None:
    """``module:qualname`` that finds the class ``cls`` again (an interpreter type without an
    importable name of its own, ``NoneType``, ``mappingproxy``: the name the ``types`` module
    gives it); None when nothing does (a class made inside a function)."""
    ref = qualified_name(cls)
    if ref is not None:
        try:
            if import_ref(ref) is cls:
                return ref
        except LookupError:
            pass
    import types

    name = next((n for n, v in vars(types).items() if v is cls and not n.startswith("_")), None)
    return None if name is None else f"types:{name}"


def import_ref(ref: str) -> Any:
    """The object a ``module:qualname`` reference names, its module imported if need be;
    LookupError says why not."""
    module, _, qualname = ref.partition(":")
    try:
        obj: Any = sys.modules.get(module) or importlib.import_module(module)
    except Exception as exc:
        raise LookupError(f"cannot import {module!r} to find {ref}: {type(exc).__name__}: {exc}") from exc
    for part in qualname.split(".") if qualname else []:
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            raise LookupError(f"{ref}: {module} has no {qualname!r}") from exc
    return obj
