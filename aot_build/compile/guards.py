"""Turn what a trace read (record.py) into the manifest's guards and weights.

Every path the export read becomes one check the shim makes on each call:

=========================  =====================================================
value read                 guard
=========================  =====================================================
int/float/bool/str/None,   ``value``: equal, same type (``eps``, ``heads``, ``act = "tanh"``,
tuples/lists/dicts of them ``training``, ``TEMP = 2.0``, config flags)
an object / ``nn.Module``  ``type``: exactly this class (a swapped submodule falls back)
function, class, module    ``ident``: the same object (a replaced helper falls back)
a dict of objects          ``keys`` (or ``len``): the same entries (hooks added, layers removed)
a method from the class    ``absent``: not overridden on the instance
nothing (``hasattr``)      ``absent``: still nothing there
an object seen twice       ``same``: both paths still lead to one object (tied modules)
a tensor                   a weight input, read by that path (tied: one input, ``same`` paths)
=========================  =====================================================
"""

from __future__ import annotations

import types
from typing import Any

import torch

from ..errors import CompileError
from ..manifest import Guard, ObjPath, Weight
from ..names import qualified_name, resolve
from ..values import encode, is_plain
from .lifting import Lifted
from .record import ABSENT, METHOD, Recording
from .specs import tensor_spec


def _ref(value: Any) -> str | None:
    """``module:qualname`` that resolves back to ``value`` itself, or None."""
    if isinstance(value, types.ModuleType):
        return f"{value.__name__}:"
    ref = qualified_name(value)
    if ref is None:
        return None
    try:
        return ref if resolve(ref) is value else None
    except LookupError:
        return None


def _class_ref(cls: type, path: ObjPath, where: str) -> str:
    ref = _ref(cls)
    if ref is None:
        raise CompileError(
            f"{where}: {path.label()} is an instance of {cls.__qualname__}, a class defined inside "
            "a function (or not found again under its name); define the class at module level so "
            "the installed package can check it"
        )
    return ref


def _guards_for(path: ObjPath, value: Any, where: str) -> list[Guard]:
    if value is ABSENT:
        return [Guard(path, "absent")]
    if value is METHOD:  # found on the class: only an instance attribute could override it
        return [Guard(path, "absent", "method")]
    if isinstance(value, torch.Tensor):
        return []  # weights, or tensors created during the call
    if is_plain(value):
        return [Guard(path, "value", encode(value))]
    if isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)):
        ref = _ref(value)
        if ref is not None:
            return [Guard(path, "ident", ref)]
        return [Guard(path, "type", _class_ref(type(value), path, where))]
    if isinstance(value, dict):  # module tables, hooks (int handles as keys), plain dicts
        keys = list(value)
        if all(type(k) is str for k in keys):  # empty ones too (hooks): compared with == {}
            return [Guard(path, "keys", encode(keys))]
        return [Guard(path, "len", len(value))]
    if type(value) in (list, tuple):
        return [Guard(path, "len", len(value))]
    return [Guard(path, "type", _class_ref(type(value), path, where))]


def _sort_key(path: ObjPath) -> tuple[Any, ...]:
    return (path.root, tuple((k, repr(v)) for k, v in path.steps))


def plan(
    rec: Recording, lifted: Lifted, weight_ids: dict[int, int], where: str
) -> tuple[list[Guard], list[Weight]]:
    """Guards and weights of a variant from its final export's recording."""
    guards: list[Guard] = []
    for path in sorted(rec.reads, key=_sort_key):
        guards += _guards_for(path, rec.reads[path], where)
    for paths in rec.aliases.values():
        first, *rest = paths
        value = rec.reads.get(first)
        if isinstance(value, torch.Tensor) and id(value) in weight_ids:
            continue  # a weight's alias paths are in its Weight record
        guards += [Guard(p, "same", first.to_json()) for p in rest]
    weights = [
        Weight(tuple(sorted(paths, key=_sort_key)), tensor_spec(t))
        for paths, t in zip(lifted.paths, lifted.tensors, strict=True)
    ]
    return guards, weights


def summary(guards: list[Guard], weights: list[Weight]) -> str:
    """One line for the build log: what the shim checks per call."""
    counts: dict[str, int] = {}
    for g in guards:
        counts[g.kind] = counts.get(g.kind, 0) + 1
    tied = sum(len(w.paths) > 1 for w in weights)
    values = [
        g.path.label()
        for g in guards
        if g.kind == "value" and g.path.steps and g.path.steps[-1][1] != "training"
    ]
    values += [g.path.label() for g in guards if g.kind == "value" and not g.path.steps]
    shown = ", ".join(values[:6]) + (f", ... ({len(values) - 6} more)" if len(values) > 6 else "")
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
    return (
        f"guards {len(guards)} ({kinds or 'none'}); weights {len(weights)}"
        + (f" ({tied} read through several paths)" if tied else "")
        + (f"; values: {shown}" if shown else "")
    )
