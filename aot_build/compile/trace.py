"""Trace one variant of an entry: its reads of Python state with torch.compile's tracer, then
its computation with torch.export, its weights lifted to inputs.

First the entry runs eagerly on the example (a function that fails as plain Python gets a plain
error). Then Dynamo traces it (:mod:`aot_build.guards.capture`): every read of state beyond
the arguments becomes a guard, every tensor read from outside the arguments a weight, by the
path it was read through. Then torch.export traces it with those weights substituted by the
export's own inputs.

The traced module returns only tensors (and sizes), so AOTInductor compiles it; plain values
in the output, outputs that are the caller's own arguments or weights, and the output's
container types are recorded and rebuilt by the shim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from .. import trees
from ..errors import CompileError
from ..guards.capture import Captured, capture
from ..guards.checks import Check
from ..guards.tree import StateTree
from ..manifest import OutLeaf
from ..values import Unencodable, encode
from .inputs import InputSet
from .lifting import Lifted
from .specs import tensor_spec

_SYM = (torch.SymInt, torch.SymFloat, torch.SymBool)


@dataclass
class Outputs:
    """How the library's outputs become the function's result."""

    tree: Any
    leaves: list[OutLeaf]


@dataclass
class Traced:
    ep: torch.export.ExportedProgram
    lifted: Lifted
    captured: Captured
    outputs: Outputs
    embedded: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    #: The tensors the program writes in place, by index among those the library takes.
    mutated: tuple[int, ...] = ()
    #: The SDPA flags the program is compiled under, when it calls SDPA (:mod:`aot_build.sdpa`).
    sdpa: dict[str, Any] = dataclasses.field(default_factory=dict)

    def state_tree(self) -> StateTree:
        """The variant's guard tree: the captured guards, and each lifted weight at its paths."""
        builder = self.captured.builder
        builder.weights = [tensor_spec(t) for t in self.lifted.tensors]
        for i, paths in enumerate(self.lifted.paths):
            for path in paths:
                builder.add(path, Check("weight", i))
        return builder.tree()


def _register_dataclasses(value: Any) -> None:
    """torch.export flattens outputs with pytree; plain dataclasses are not registered
    there by default. Registering them in this (build) process is enough: the shim rebuilds
    them from their fields."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if type(value) not in pytree.SUPPORTED_NODES:
            torch.export.register_dataclass(type(value))
    if isinstance(value, (tuple, list)):
        for v in value:
            _register_dataclasses(v)
    elif isinstance(value, dict):
        for v in value.values():
            _register_dataclasses(v)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            _register_dataclasses(getattr(value, f.name))


def split_outputs(
    out: Any, arg_leaves: list[Any], weights: tuple[Any, ...], where: str
) -> tuple[list[Any], Outputs]:
    """The library's outputs (tensors and sizes) and how to rebuild the result."""
    leaves, spec = pytree.tree_flatten(out)
    try:
        tree = trees.encode(spec, "output")
    except trees.TreeError as exc:
        raise CompileError(f"{where}: {exc}") from exc
    keep: list[Any] = []
    kinds: list[OutLeaf] = []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            same_arg = next((k for k, a in enumerate(arg_leaves) if a is leaf), None)
            same_weight = next((k for k, w in enumerate(weights) if w is leaf), None)
            if same_arg is not None:
                kinds.append(OutLeaf("input", index=same_arg))
            elif same_weight is not None:
                kinds.append(OutLeaf("weight", index=same_weight))
            else:
                keep.append(leaf)
                kinds.append(OutLeaf("tensor"))
        elif isinstance(leaf, _SYM):
            keep.append(leaf)
            kinds.append(
                OutLeaf("sym", value={torch.SymInt: "int", torch.SymFloat: "float"}.get(type(leaf), "bool"))
            )
        else:
            try:
                kinds.append(OutLeaf("value", value=encode(leaf)))
            except Unencodable as exc:
                raise CompileError(
                    f"{where}: output leaf {i} is {exc}; an entry may return tensors and plain "
                    "values (int, float, bool, str, None), in tuples, lists, dicts, NamedTuples, "
                    "dataclasses and pytree-registered types.\n  return the object's tensors instead, "
                    "or make its class a dataclass (or register it with "
                    "torch.utils._pytree.register_pytree_node)"
                ) from exc
    return keep, Outputs(tree, kinds)


class _Traced(torch.nn.Module):
    """Calls the entry with the lifted weights substituted at their paths; returns the tensors
    of the result."""

    def __init__(
        self,
        fn: Callable[..., Any],
        lifted: Lifted,
        self_obj: Any,
        where: str,
    ) -> None:
        super().__init__()
        self._fn = fn
        self._lifted = lifted
        # a plain tuple: assigned directly, an nn.Module would become this module's child and
        # export would treat its parameters as this module's own
        self._self_obj = (self_obj,)
        self._where = where
        # results live on a plain object: export restores attributes set on the module
        self.result = _Result()

    def forward(self, args: tuple[Any, ...], weights: tuple[torch.Tensor, ...]) -> Any:
        self_obj = self._self_obj[0]
        with self._lifted.bound(weights, self_obj, self._fn):
            out = self._fn(self_obj, *args) if self_obj is not None else self._fn(*args)
        keep, self.result.outputs = split_outputs(out, pytree.tree_leaves(args), weights, self._where)
        return tuple(keep)


class _Result:
    def __init__(self) -> None:
        self.outputs: Outputs | None = None


def _to(device: str, value: Any) -> Any:
    return pytree.tree_map(lambda v: v.to(device) if isinstance(v, torch.Tensor) else v, value)


class _AutogradCalls(TorchFunctionMode):
    """Notes whether the function differentiates by itself (``torch.autograd.grad``), and
    whether it calls ``backward()``, whose ``.grad`` writes a library cannot make."""

    def __init__(self) -> None:
        super().__init__()
        self.grad = False
        self.backward = False

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if func is torch.autograd.grad:
            self.grad = True
        elif func is torch.Tensor.backward or func is torch.autograd.backward:
            self.backward = True
        return func(*args, **(kwargs or {}))


def _refuse_grad_outputs(eager: Any, outputs: Outputs, where: str) -> None:
    """Eager, under no_grad, returned a tensor that requires grad (computed under
    ``enable_grad`` inside the function); the library's outputs never do."""
    for i, (leaf, kind) in enumerate(zip(pytree.tree_leaves(eager), outputs.leaves, strict=False)):
        if kind.kind == "tensor" and isinstance(leaf, torch.Tensor) and leaf.requires_grad:
            raise CompileError(
                f"{where}: output leaf {i} requires grad even under torch.no_grad() (it is computed "
                "under torch.enable_grad() inside the function); the compiled library returns plain "
                "tensors.\n  return it detached (loss.detach()), or make the entry a training entry "
                "(backward=True) without enable_grad inside"
            )


def trace(fn: Callable[..., Any], iset: InputSet, device: str, where: str) -> Traced:
    """Capture and export ``fn`` on ``iset`` for ``device``; see the module docstring."""
    self_obj = iset.self_obj
    calls = _AutogradCalls()
    try:
        with torch.no_grad(), calls:
            eager = fn(self_obj, *iset.args) if self_obj is not None else fn(*iset.args)
    except Exception as exc:
        raise CompileError(
            f"{where}: the function raised {type(exc).__name__} when run on example_inputs: {exc}\n  "
            "fix the function or example_inputs so that it runs as plain Python first"
        ) from exc
    if calls.backward:
        raise CompileError(
            f"{where}: calls backward(), which accumulates into .grad attributes; a compiled "
            "library cannot set them.\n  compute the gradients with torch.autograd.grad(loss, "
            "params) and use them in the function (an SGD step: p.sub_(lr * g) under no_grad)"
        )
    _register_dataclasses(eager)
    captured = capture(fn, self_obj, iset.args, where)
    lifted = Lifted()
    for paths, tensor in captured.weights:
        for path in paths:
            lifted.add(path, tensor)
    traced = _Traced(fn, lifted, self_obj, where)
    args = _to(device, iset.args)
    # A function that differentiates by itself needs its weights' requires_grad as they are
    # (the library computes those gradients inside); others trace on plain tensors.
    weights = tuple(
        t.detach().to(device).requires_grad_(calls.grad and t.requires_grad) for t in lifted.tensors
    )
    dynamic_shapes = (iset.export_spec(), (None,) * len(weights))
    # Under no_grad, as the eager run and the capture: a function that reads
    # torch.is_grad_enabled() gets the answer its guard checks (the shim runs the library
    # under no_grad too; a training entry's backward is derived from this program afterwards).
    with torch.no_grad():
        if calls.grad:
            # export's default (pre-dispatch) IR loses the tensors autograd saves between the
            # function's forward and its torch.autograd.grad (2.13: "a fake tensor in the
            # exported program constant's list"); the ATen-level trace runs the backward as
            # it records it.
            from torch.export._trace import _export

            ep = _export(
                traced, (args, weights), dynamic_shapes=dynamic_shapes, strict=False, pre_dispatch=False
            )
        else:
            ep = torch.export.export(traced, (args, weights), dynamic_shapes=dynamic_shapes, strict=False)
    assert traced.result.outputs is not None
    _refuse_grad_outputs(eager, traced.result.outputs, where)
    return Traced(ep, lifted, captured, traced.result.outputs)
