"""Example-input sets as the build uses them: bound to the signature, ``self`` split off for
method entries, ``dynamic_shapes`` aligned with the tensor arguments, and the input sets of the size-one
variants, which serve calls whose dynamic dimensions are 1.

torch.export reasons about a dynamic dimension as if it were never 0 or 1 (broadcasting,
``squeeze``, ``if x.shape[0] == 1``), whatever range it reports, so an artifact exported
with ``Dim(min=1)`` can compute something else than eager Python at size 1. The dynamic
artifact therefore serves sizes from 2 up, and every combination of dimensions whose range
includes 1 gets its own *size-one variant*, exported at size 1.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ..decorate import AotEntry
from ..errors import EntryError
from ..values import is_plain

#: At most this many size-one variants per input set (2**dims - 1 are needed for full cover).
MAX_SIZE_ONE = 7


@dataclass
class InputSet:
    """One set of example arguments.

    Args:
        index: position in ``example_inputs``.
        args: the canonical arguments (one per parameter), ``self`` excluded.
        self_obj: the instance, for a method entry.
        dims: per tensor leaf of ``args`` (pytree order): ``{dim: Dim}`` of its dynamic dims.
        labels: per leaf of ``args``: its name in messages (``x``, ``batch['ids']``).
        size_one: symbol name → 1, for the copy of a size-one variant.
    """

    index: int
    args: tuple[Any, ...]
    self_obj: Any
    dims: list[dict[int, Any]]
    labels: list[str]
    size_one: dict[str, int] = field(default_factory=dict)

    def tensor_labels(self) -> list[str]:
        leaves = pytree.tree_leaves(self.args)
        return [lb for lb, v in zip(self.labels, leaves, strict=True) if isinstance(v, torch.Tensor)]

    def export_spec(self) -> Any:
        """``dynamic_shapes`` for torch.export, in the structure of ``args``."""
        maps = iter(self.dims)

        def rebuild(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                m = next(maps)
                return dict(m) if m else None
            if isinstance(value, (tuple, list)):
                return (
                    type(value)(rebuild(v) for v in value)
                    if type(value) in (tuple, list)
                    else tuple(rebuild(v) for v in value)
                )
            if isinstance(value, dict):
                return {k: rebuild(v) for k, v in value.items()}
            return None

        return tuple(rebuild(a) for a in self.args)


def _is_hint(d: Any) -> bool:
    return type(d).__name__ == "_DimHint"


def _dim_map(spec: Any, tensor: torch.Tensor, where: str) -> dict[int, Any]:
    ndim = tensor.dim()
    if spec is None:
        return {}
    if isinstance(spec, dict):
        items = list(spec.items())
    elif isinstance(spec, (tuple, list)):
        if len(spec) != ndim:
            raise EntryError(f"{where}: gives {len(spec)} dimensions for a {ndim}-d tensor")
        items = list(enumerate(spec))
    else:
        raise EntryError(f"{where}: expected a dict {{dim: Dim}} or a tuple per dimension, got {spec!r}")
    out: dict[int, Any] = {}
    for j, d in items:
        if not isinstance(j, int) or not -ndim <= j < ndim:
            raise EntryError(f"{where}: dimension {j!r} does not exist in a {ndim}-d tensor")
        if d is None or (_is_hint(d) and getattr(d, "type", None) is not None and d.type.name == "STATIC"):
            continue
        out[j % ndim] = d
    return out


def _align(value: Any, spec: Any, out: list[dict[int, Any]], where: str) -> None:
    """Append, in pytree leaf order, the dynamic dims ``spec`` gives each tensor of ``value``."""
    if isinstance(value, torch.Tensor):
        out.append(_dim_map(spec, value, where))
        return
    if isinstance(value, (tuple, list)):
        if spec is not None and (not isinstance(spec, (tuple, list)) or len(spec) != len(value)):
            raise EntryError(f"{where}: expected {len(value)} entries (one per element), got {spec!r}")
        for i, v in enumerate(value):
            _align(v, None if spec is None else spec[i], out, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        if spec is not None and (not isinstance(spec, dict) or set(spec) - set(value)):
            raise EntryError(f"{where}: expected a dict with keys among {sorted(value)}, got {spec!r}")
        for k, v in value.items():
            _align(v, None if spec is None else spec.get(k), out, f"{where}[{k!r}]")
        return
    if spec is not None:
        raise EntryError(f"{where}: a {type(value).__name__} argument has no dimensions; use None")


def _leaf_labels(args: tuple[Any, ...], names: tuple[str, ...]) -> list[str]:
    labelled, _ = pytree.tree_flatten_with_path(args)
    labels = []
    for keypath, _leaf in labelled:
        first = keypath[0]
        idx = getattr(first, "idx", 0)
        labels.append(names[idx] + pytree.keystr(keypath[1:]))
    return labels


def _canonical_spec(entry: AotEntry, spec: Any, n: int, where: str) -> tuple[Any, ...]:
    names = entry.call_signature.names
    if spec is None:
        return (None,) * n
    if isinstance(spec, dict) and all(isinstance(k, str) for k in spec):
        unknown = set(spec) - set(names)
        if unknown:
            raise EntryError(f"{where}: dynamic_shapes names {sorted(unknown)}, not parameters of {names}")
        return tuple(spec.get(name) for name in names)
    if not isinstance(spec, (tuple, list)) or len(spec) > n:
        raise EntryError(
            f"{where}: dynamic_shapes must be a tuple with one entry per argument ({', '.join(names)}) "
            f"or a dict by parameter name, got {spec!r}"
        )
    return (*spec, *(None,) * (n - len(spec)))


def _no_method(entry: AotEntry, here: str) -> str:
    """Why an entry defined in a class that is no method of it cannot be built, and what to
    write instead (``@staticmethod`` over ``@aot_entry`` builds: it is no method entry)."""
    cls, _, name = entry.__wrapped__.__qualname__.rpartition(".")
    if entry.class_wrapper() is classmethod:
        return (
            f"{here}: @classmethod over @aot_entry: calls would pass the class first (cls), which "
            "an artifact cannot take as an argument.\n  write @staticmethod over @aot_entry and "
            f"drop cls, naming the class where the function reads it ({cls}.K for cls.K): "
            f"@staticmethod, @aot_entry(example_inputs=...), def {name}(x): ... ({cls}.{name}(x) "
            f"and {cls}().{name}(x) then use the artifact); or make it a module-level @aot_entry "
            "function that the classmethod calls"
        )
    return (
        f"{here}: @aot_entry is inside a class but is no method of it (a decorator other than "
        "@staticmethod over @aot_entry?); a method entry is a plain method of an nn.Module "
        "subclass.\n  put @aot_entry over the other decorator, or make it a module-level "
        "@aot_entry function, and call it from the class"
    )


def input_sets(entry: AotEntry, where: str) -> list[InputSet]:
    """The entry's example sets, validated; EntryError names the set and the fix."""
    if entry.is_method and entry.owner is None:  # defined in a class, never set there (@classmethod)
        raise EntryError(_no_method(entry, where))
    out = []
    sets = entry.input_sets()
    for index, (example, spec) in enumerate(sets):
        here = f"{where}: input set {index}" if len(sets) > 1 else where
        canonical = entry.call_signature.canonical_example(example, here)
        full_spec = _canonical_spec(entry, spec, len(canonical), here)
        names = entry.call_signature.names
        self_obj = None
        if entry.is_method:
            self_obj = canonical[0]
            owner = entry.owner
            if type(self_obj) is not owner:
                raise EntryError(
                    f"{here}: a method entry's example_inputs start with the instance (self); got "
                    f"{type(self_obj).__name__}, expected a {getattr(owner, '__qualname__', owner)} "
                    f"instance, e.g. example_inputs=lambda: (MyBlock(64), torch.randn(2, 16, 64))"
                )
            if full_spec[0] is not None:
                raise EntryError(f"{here}: dynamic_shapes must have None in self's place")
            canonical, full_spec, names = canonical[1:], full_spec[1:], names[1:]
        dims: list[dict[int, Any]] = []
        for value, s, name in zip(canonical, full_spec, names, strict=True):
            _align(value, s, dims, f"{here}: dynamic_shapes for {name}")
        labels = _leaf_labels(canonical, names)
        for value, label in zip(pytree.tree_leaves(canonical), labels, strict=True):
            if not isinstance(value, torch.Tensor) and not is_plain(value):
                raise EntryError(
                    f"{here}: example argument {label} is a {type(value).__name__}; example inputs may "
                    "hold tensors, bool, int, float, str and None, in tuples, lists and dicts; fix "
                    "example_inputs (for a method, only self may be another object)"
                )
        iset = InputSet(index, canonical, self_obj, dims, labels)
        tensors = [v for v in pytree.tree_leaves(canonical) if isinstance(v, torch.Tensor)]
        for t, m, label in zip(tensors, dims, iset.tensor_labels(), strict=True):
            for j in m:
                if t.shape[j] < 2:
                    raise EntryError(
                        f"{here}: {label} has size {t.shape[j]} in dynamic dimension {j}; give an "
                        "example of size 2 or more there (torch.export treats sizes 0 and 1 as "
                        "special; aot_build builds the size-one artifact itself when the range includes 1)"
                    )
        out.append(iset)
    return out


def size_one_copies(
    base: InputSet, exprs: list[tuple[Any, ...]], symbols: list[Any], names: dict[Any, str]
) -> list[InputSet]:
    """The input sets of the size-one variants of ``base``: copies with each non-empty subset
    of ``symbols`` (those whose range includes 1) fixed to size 1. ``exprs``: per tensor leaf,
    each dim's sympy size expression in the generic export; ``names``: the symbols' names, the
    copies' ``size_one`` keys."""
    combos = [c for r in range(1, len(symbols) + 1) for c in itertools.combinations(symbols, r)]
    if len(combos) > MAX_SIZE_ONE:
        raise EntryError(
            f"{len(symbols)} dynamic dimensions include size 1 ({', '.join(names[s] for s in symbols)}), "
            f"which needs {len(combos)} size-one artifacts per target; give some of them min=2 (calls "
            "with size 1 there then run as plain Python)"
        )
    copies = []
    for combo in combos:
        subs = {s: 1 for s in combo}
        leaves = pytree.tree_leaves(base.args)
        _, spec = pytree.tree_flatten(base.args)
        new_leaves, new_dims, k = [], [], 0
        for v in leaves:
            if not isinstance(v, torch.Tensor):
                new_leaves.append(v)
                continue
            dims = dict(base.dims[k])
            t = v
            for j, e in enumerate(exprs[k]):
                if isinstance(e, int) or not (e.free_symbols & set(combo)):
                    continue
                size = int(e.subs(subs)) if not e.free_symbols - set(combo) else None
                if size is None or size > t.shape[j]:
                    raise EntryError(
                        f"{base.tensor_labels()[k]} dim {j} (= {e}) cannot be narrowed to the size-one case; "
                        "give the dimensions it depends on min=2"
                    )
                t = t.narrow(j, 0, size)
                dims.pop(j, None)
            if t is not v:
                fmt = (
                    torch.channels_last
                    if v.dim() == 4
                    and v.is_contiguous(memory_format=torch.channels_last)
                    and not v.is_contiguous()
                    else torch.contiguous_format
                )
                t = t.contiguous(memory_format=fmt)
            new_leaves.append(t)
            new_dims.append(dims)
            k += 1
        copies.append(
            InputSet(
                base.index,
                pytree.tree_unflatten(new_leaves, spec),
                base.self_obj,
                new_dims,
                base.labels,
                {names[s]: 1 for s in combo},
            )
        )
    return copies


#: Deprecated alias of :func:`size_one_copies` (for callers not yet renamed).
