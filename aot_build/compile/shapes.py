"""Read an exported program's input shapes: each dimension a fixed size, a symbol, or a size
derived from one (``2*batch``), with the ranges torch.export proved, named after the user's
``Dim`` objects. These become the manifest's input specs, which the shim checks per call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy
import torch

from ..errors import CompileError
from ..manifest import UNBOUNDED, DimSpec, InputTensor, Leaf
from ..values import encode
from .inputs import InputSet
from .specs import dtype_name

#: The smallest size a dynamic artifact serves; 1 gets its own (size-one) variant (see inputs.py).
GENERIC_MIN = 2


@dataclass
class Shapes:
    """Input shapes of one exported variant.

    Args:
        exprs: per tensor input, each dimension as an int or a sympy expression.
        ranges: per root symbol, the inclusive range torch.export proved.
        names: per root symbol, the name used in the manifest and messages.
    """

    exprs: list[tuple[Any, ...]]
    ranges: dict[Any, tuple[int, int]]
    names: dict[Any, str]

    def symbols(self) -> dict[str, tuple[int, int]]:
        """Manifest ranges: the dynamic artifact serves sizes from GENERIC_MIN up."""
        return {self.names[s]: (max(lo, GENERIC_MIN), hi) for s, (lo, hi) in self.ranges.items()}

    def size_one_symbols(self) -> list[Any]:
        """Symbols whose range includes 1 (each needs a size-one variant)."""
        return [s for s, (lo, _) in self.ranges.items() if lo <= 1]


def _bound(v: Any) -> int:
    if getattr(v, "is_finite", True) is False:  # torch's int_oo: no upper bound
        return UNBOUNDED
    try:
        return min(int(v), UNBOUNDED)
    except Exception:
        return UNBOUNDED


def read_shapes(ep: torch.export.ExportedProgram, iset: InputSet) -> Shapes:
    placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    tensor_inputs = [
        s.arg.name
        for s in ep.graph_signature.input_specs
        if s.kind == torch.export.graph_signature.InputKind.USER_INPUT
        and isinstance(s.arg, torch.export.graph_signature.TensorArgument)
    ][: len(iset.dims)]
    exprs: list[tuple[Any, ...]] = []
    for name in tensor_inputs:
        val = placeholders[name].meta["val"]
        exprs.append(tuple(int(d) if isinstance(d, int) else d.node.expr for d in val.shape))
    ranges: dict[Any, tuple[int, int]] = {}
    for sym, vr in ep.range_constraints.items():
        if isinstance(sym, sympy.Symbol):
            ranges[sym] = (_bound(vr.lower), _bound(vr.upper))
    names: dict[Any, str] = {}
    tensor_labels = iset.tensor_labels()
    # a symbol is named after the user's Dim where it stands alone; else after its first use
    for k, dims in enumerate(iset.dims):
        for j, d in dims.items():
            e = exprs[k][j]
            if (
                isinstance(e, sympy.Symbol)
                and e not in names
                and isinstance(getattr(d, "__name__", None), str)
            ):
                if type(d).__name__ not in ("_DerivedDim", "_DimHint"):
                    names[e] = d.__name__
    for k, e_dims in enumerate(exprs):
        for j, e in enumerate(e_dims):
            if isinstance(e, sympy.Symbol) and e not in names:
                names[e] = f"{tensor_labels[k]}.size({j})"
    for sym in list(ranges):
        names.setdefault(sym, str(sym))
    return Shapes(exprs, ranges, names)


def _dim_spec(e: Any, names: dict[Any, str], where: str) -> DimSpec:
    if isinstance(e, int):
        return e
    if isinstance(e, sympy.Symbol):
        return names[e]
    free = list(e.free_symbols)
    if len(free) == 1:
        s = free[0]
        mul, add = e.coeff(s), e.subs(s, 0)
        if mul.is_Integer and add.is_Integer and sympy.expand(mul * s + add - e) == 0:
            return {"sym": names[s], "mul": int(mul), "add": int(add)}
    raise CompileError(
        f"{where}: a dimension's size is {e}, which aot_build cannot check per call (only a "
        "symbol or a*symbol+b); use one Dim per dimension or derived dims like 2*batch"
    )


def input_leaves(args_leaves: list[Any], shapes: Shapes, iset: InputSet, where: str) -> tuple[Leaf, ...]:
    """Manifest leaves for the flattened arguments of ``iset``."""
    out: list[Leaf] = []
    k = 0
    for value, label in zip(args_leaves, iset.labels, strict=True):
        if not isinstance(value, torch.Tensor):
            out.append(Leaf(value=encode(value)))
            continue
        dims = tuple(_dim_spec(e, shapes.names, f"{where}: {label}") for e in shapes.exprs[k])
        dynamic = any(not isinstance(d, int) for d in dims)
        stride: tuple[int, ...]
        if value.is_contiguous():
            layout, stride = "contiguous", ()
        elif value.dim() == 4 and value.is_contiguous(memory_format=torch.channels_last):
            layout, stride = "channels_last", ()
        elif not dynamic:
            layout, stride = "strides", tuple(value.stride())
        else:
            raise CompileError(
                f"{where}: example argument {label} is not contiguous, and its dimensions are "
                "dynamic; pass a .contiguous() example (calls are then checked to be contiguous)"
            )
        out.append(Leaf(tensor=InputTensor(dtype_name(value.dtype), value.device.type, dims, layout, stride)))
        k += 1
    return tuple(out)
