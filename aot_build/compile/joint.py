"""Training entries: split a lifted inference program into a forward and a backward program
that AOTInductor compiles separately; :mod:`aot_build.load.autograd` joins them again.

Route and reasons:

* **Joint graph from AOTAutograd** (``_aot_export_function(..., trace_joint=True)``, the body of
  the public ``aot_export_joint_simple``, called directly for its metadata). It traces the
  exported graph as it is, with the program's own fake inputs: the symbols of its dynamic dims
  and their ranges carry over, no dim is guessed dynamic (``aot_function(dynamic=True)`` would
  make every dim symbolic, duck-sized). The metadata says which outputs alias inputs, which
  inputs are mutated and which outputs take a gradient.
* **Outputs that alias an input** (a view of an argument or weight) are cloned and the joint
  traced again: AOTAutograd would regenerate such views outside the graph, which a shipped
  library cannot.
* **In-place updates of inputs that take no gradient** (BatchNorm's running statistics and
  ``num_batches_tracked`` in train mode, a cache, a counter): AOTAutograd functionalizes them,
  and the forward program returns their new values first; the runtime copies them into the
  caller's tensors (``copy_``). Writes to inputs that take a gradient are refused.
* **Min-cut rematerialization partitioner** (``partitioner="default"`` picks the eager-like
  one): it recomputes cheap pointwise ops in the backward instead of saving them, so fewer and
  smaller tensors live between forward and backward.
* **Each partition re-exported with torch.export**, because AOTInductor compiles
  ExportedPrograms. The forward takes the same dims as the original, with the same ranges; the
  backward's inputs get the same ``Dim`` per symbol (``a*Dim+b`` for derived sizes), so its
  shapes follow from the forward's and the runtime checks only the forward's inputs.
* **No SymInt crosses the boundary**: the partitioner saves sizes (SymInts) for the backward,
  and a library takes tensors only. The backward program computes each saved size from the
  sizes of the tensors it receives; a size no saved tensor or gradient has is carried by a
  zero-element "shape carrier" tensor ``(size, 0)`` the forward returns (no bytes).
* **Saved tensors are made contiguous** in the forward program: the backward library is
  compiled for the strides it was exported with, and contiguous is what both sides can agree on
  (the runtime re-checks it; a view of a weight costs a copy).
* **Gradients that are None** (an input that requires grad but no differentiable output depends
  on) are not outputs of the backward; the metadata lists them as absent, and the runtime gives
  None, as eager autograd leaves ``.grad`` unset for them.
* **Random ops are refused**: the forward would draw its mask from the library's generator,
  not torch's, and a remat partitioner must never recompute them in the backward; until that is
  designed, an entry with dropout in training mode is refused with a clear error.

The record of how the two connect is :class:`aot_build.manifest.TrainingRecord`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch.export import Dim

from ..errors import CompileError
from ..manifest import TrainingRecord

PARTITIONERS = ("min_cut", "default")


@dataclass
class JointPrograms:
    """The two programs of a training entry and how the runtime connects them."""

    forward: torch.export.ExportedProgram
    backward: torch.export.ExportedProgram
    record: TrainingRecord


# ---------------------------------------------------------------------------- helpers


def _user_placeholders(ep: torch.export.ExportedProgram) -> list[torch.fx.Node]:
    from torch.export.graph_signature import InputKind

    kinds = {s.arg.name: s.kind for s in ep.graph_signature.input_specs}
    nodes = [n for n in ep.graph.nodes if n.op == "placeholder"]
    others = [n.name for n in nodes if kinds.get(n.name) != InputKind.USER_INPUT]
    if others:
        raise CompileError(
            f"the program has inputs that are not plain user inputs ({', '.join(others)}); "
            "training entries need every weight lifted to an input"
        )
    return nodes


def _expr(d: Any) -> Any:
    """A size as an int or a sympy expression."""
    if isinstance(d, int):
        return d
    e = d.node.expr
    return int(e) if isinstance(e, sympy.Integer) else e


def _hint(d: Any) -> int:
    from torch.fx.experimental.symbolic_shapes import optimization_hint

    return int(optimization_hint(d))


def _example(val: torch.Tensor, contiguous: bool) -> torch.Tensor:
    """A real tensor shaped like the fake ``val`` at the trace's hint sizes (zeros: export reads
    only shapes, dtypes and strides)."""
    shape = [_hint(d) for d in val.shape]
    if contiguous:
        return torch.zeros(shape, dtype=val.dtype, device=val.device)
    stride = [_hint(s) for s in val.stride()]
    return torch.empty_strided(shape, stride, dtype=val.dtype, device=val.device).zero_()


def _linear(e: Any) -> tuple[sympy.Symbol, int, int] | None:
    """``a*s+b`` as (s, a, b), else None."""
    free = list(e.free_symbols)
    if len(free) != 1:
        return None
    s = free[0]
    a, b = e.coeff(s), e.subs(s, 0)
    if a.is_Integer and b.is_Integer and sympy.expand(a * s + b - e) == 0:
        return s, int(a), int(b)
    return None


class _Dims:
    """One torch.export ``Dim`` per symbol of the original program, with its range."""

    def __init__(self, ep: torch.export.ExportedProgram) -> None:
        self.ranges: dict[sympy.Symbol, tuple[int, int | None]] = {}
        for sym, vr in ep.range_constraints.items():
            if isinstance(sym, sympy.Symbol):
                lo = int(vr.lower) if getattr(vr.lower, "is_finite", True) else 0
                hi = int(vr.upper) if getattr(vr.upper, "is_finite", True) is not False else None
                self.ranges[sym] = (lo, hi)
        self._dims: dict[sympy.Symbol, Any] = {}

    def dim(self, sym: sympy.Symbol) -> Any:
        if sym not in self._dims:
            lo, hi = self.ranges.get(sym, (0, None))
            name = f"d_{sym}"
            self._dims[sym] = Dim(name, min=lo, max=hi) if hi is not None else Dim(name, min=lo)
        return self._dims[sym]

    def spec(self, val: torch.Tensor) -> dict[int, Any] | None:
        out: dict[int, Any] = {}
        for i, d in enumerate(val.shape):
            e = _expr(d)
            if isinstance(e, int):
                continue
            if isinstance(e, sympy.Symbol):
                out[i] = self.dim(e)
                continue
            lin = _linear(e)
            if lin is not None:
                s, a, b = lin
                derived = self.dim(s) * a if a != 1 else self.dim(s)
                out[i] = derived + b if b else derived
            else:
                out[i] = Dim.AUTO
        return out or None


def _is_random(node: torch.fx.Node) -> bool:
    """An op that draws from the RNG; attention kernels are tagged so for their dropout, which
    they only draw when ``dropout_p`` is not 0."""
    target = node.target
    if not (isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags):
        return False
    for k, arg in enumerate(target._schema.arguments):
        if arg.name == "dropout_p":
            value = node.args[k] if k < len(node.args) else node.kwargs.get("dropout_p", arg.default_value)
            return bool(value != 0)
    return True


# ---------------------------------------------------------------------------- joint trace


def _trace_joint(
    gm: torch.fx.GraphModule, fakes: list[torch.Tensor], clone: frozenset[int]
) -> tuple[torch.fx.GraphModule, Any]:
    from torch._functorch.aot_autograd import _aot_export_function

    def flat_fn(*args: torch.Tensor) -> tuple[Any, ...]:
        out = gm(*args)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        return tuple(o.clone() if i in clone else o for i, o in enumerate(outs))

    try:
        fx_g, meta, _in, _out = _aot_export_function(flat_fn, tuple(fakes), trace_joint=True)
    except Exception as exc:
        if "mutation" in str(exc):
            raise CompileError(
                "the program writes in place to an input that requires grad; training entries may "
                "update only tensors that take no gradient (running statistics, caches, counters): "
                "return the new value instead"
            ) from exc
        raise CompileError(
            f"tracing the joint forward/backward graph failed: {type(exc).__name__}: {exc}"
        ) from exc
    assert isinstance(fx_g, torch.fx.GraphModule)
    return fx_g, meta


def _partition(
    fx_g: torch.fx.GraphModule, num_fwd_outputs: int, partitioner: str
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    from torch._functorch.partitioners import default_partition, min_cut_rematerialization_partition

    ph = [n for n in fx_g.graph.nodes if n.op == "placeholder"]
    joint_inputs = [
        [n.meta["val"] for n in ph if n.name.startswith("primals")],
        [n.meta["val"] for n in ph if n.name.startswith("tangents")],
    ]
    fn: Callable[..., tuple[torch.fx.GraphModule, torch.fx.GraphModule]]
    fn = min_cut_rematerialization_partition if partitioner == "min_cut" else default_partition
    return fn(fx_g, joint_inputs, num_fwd_outputs=num_fwd_outputs)


# ---------------------------------------------------------------------------- re-export


class _Forward(torch.nn.Module):
    """The partitioned forward: new values of updated inputs and user outputs, then the saved
    tensors (contiguous; an updated input saved as it was, cloned), then one zero-element
    ``(size, 0)`` tensor per carried size. Saved SymInts are dropped."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        n_out: int,
        saved_tensor_pos: list[int],
        carriers: list[tuple[int, int]],
        clone_saved: set[int],
    ) -> None:
        super().__init__()
        self.gm = gm
        self._n_out = n_out
        self._saved = saved_tensor_pos
        self._carriers = carriers
        self._clone = clone_saved

    def forward(self, flat: tuple[torch.Tensor, ...]) -> tuple[Any, ...]:
        outs = self.gm(*flat)
        user = list(outs[: self._n_out])
        saved = [outs[p].clone() if p in self._clone else outs[p].contiguous() for p in self._saved]
        carried = [flat[i].new_empty((flat[i].size(d), 0)) for i, d in self._carriers]
        return (*user, *saved, *carried)


class _Backward(torch.nn.Module):
    """The partitioned backward, taking tensors only: each SymInt input of the partitioned graph
    is computed from the sizes of the tensors it receives. Returns the gradients that exist."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        slots: list[Any],
        sources: dict[sympy.Symbol, tuple[int, int]],
        grad_pos: list[int],
    ) -> None:
        super().__init__()
        self.gm = gm
        self._slots = slots  # per graph input: int (index into our tensors) or a sympy expr
        self._sources = sources
        self._grad_pos = grad_pos

    def forward(self, flat: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        from torch.utils._sympy.interp import sympy_interp
        from torch.utils._sympy.reference import PythonReferenceAnalysis

        env = {s: flat[i].size(d) for s, (i, d) in self._sources.items()}
        args = [
            flat[slot] if isinstance(slot, int) else sympy_interp(PythonReferenceAnalysis, env, slot)
            for slot in self._slots
        ]
        grads = self.gm(*args)
        return tuple(grads[p] for p in self._grad_pos)


def _export(mod: torch.nn.Module, examples: list[torch.Tensor], specs: list[Any], what: str) -> Any:
    try:
        return torch.export.export(mod, (tuple(examples),), dynamic_shapes=(tuple(specs),), strict=False)
    except Exception as exc:
        raise CompileError(
            f"re-exporting the partitioned {what} failed: {type(exc).__name__}: {exc}"
        ) from exc


# ---------------------------------------------------------------------------- public


def export_joint(
    ep: torch.export.ExportedProgram,
    requires_grad: Sequence[bool],
    partitioner: str = "min_cut",
) -> JointPrograms:
    """Split ``ep`` (flat tensor inputs, weights lifted; flat tensor outputs) into a forward
    and a backward program for AOTInductor; ``requires_grad[i]``: whether flat input ``i``
    gets a gradient. See the module docstring for the calling convention and metadata."""
    if partitioner not in PARTITIONERS:
        raise ValueError(f"partitioner must be one of {PARTITIONERS}, not {partitioner!r}")
    placeholders = _user_placeholders(ep)
    flags = [bool(f) for f in requires_grad]
    if len(flags) != len(placeholders):
        raise CompileError(
            f"requires_grad has {len(flags)} flags, the program has {len(placeholders)} inputs"
        )
    vals = [n.meta["val"] for n in placeholders]
    for i, (v, f) in enumerate(zip(vals, flags, strict=True)):
        if not isinstance(v, torch.Tensor):
            raise CompileError(
                f"input {i} is not a tensor ({type(v).__name__}); training entries take tensors"
            )
        if f and not (v.dtype.is_floating_point or v.dtype.is_complex):
            raise CompileError(f"input {i} has dtype {v.dtype}, which cannot require grad")
    if not any(flags):
        raise CompileError("no input requires grad: a training entry needs at least one")
    fake_mode = vals[0].fake_mode
    with fake_mode:
        fakes = [v.detach().requires_grad_(f) for v, f in zip(vals, flags, strict=True)]

    gm = ep.graph_module
    clone: frozenset[int] = frozenset()
    for _ in range(2):
        fx_g, meta = _trace_joint(gm, fakes, clone)
        infos = meta.input_info
        refused = [i for i, f in enumerate(infos) if f.mutates_metadata or (f.mutates_data and flags[i])]
        if refused:
            raise CompileError(
                f"the program writes in place to an input that requires grad (or changes its shape or "
                f"strides): flat input(s) {refused}; training entries may update only tensors that "
                "take no gradient (running statistics, caches, counters): return the new value instead"
            )
        aliased = frozenset(i for i, o in enumerate(meta.output_info) if o.output_type.name != "non_alias")
        if not aliased - clone:
            break
        clone = clone | aliased
    else:  # pragma: no cover - the clones make every output fresh
        raise CompileError("outputs still alias inputs after cloning them")

    random = sorted({str(n.target) for n in fx_g.graph.nodes if n.op == "call_function" and _is_random(n)})
    if random:
        raise CompileError(
            f"the program draws random numbers ({', '.join(random)}), e.g. dropout in training "
            "mode; training entries do not support random ops yet (call .eval() on the module, or "
            "make the entry deterministic)"
        )

    n_out = len(meta.output_info)
    diff = [bool(o.requires_grad) for o in meta.output_info]
    # inputs updated in place: the joint graph returns their new values first
    mutated = [i for i, info in enumerate(meta.input_info) if info.mutates_data]
    n_fwd = len(mutated) + n_out
    fw_gm, bw_gm = _partition(fx_g, n_fwd, partitioner)

    # forward: which outputs after the user outputs are tensors (saved) or SymInts (dropped)
    fw_out_node = next(n for n in fw_gm.graph.nodes if n.op == "output")
    fw_outs = list(fw_out_node.args[0])
    saved_nodes = fw_outs[n_fwd:]
    saved_tensor_pos = [
        n_fwd + k for k, node in enumerate(saved_nodes) if isinstance(node.meta.get("val"), torch.Tensor)
    ]
    saved_names = [fw_outs[p].name for p in saved_tensor_pos]
    # an input saved as it was must not follow the caller's copy of its new value
    fw_primals = [n.name for n in fw_gm.graph.nodes if n.op == "placeholder"]
    written = {fw_primals[i] for i in mutated if i < len(fw_primals)}
    clone_saved = {p for p in saved_tensor_pos if fw_outs[p].name in written}

    # backward inputs: saved tensors by name, SymInts as expressions, then tangents
    bw_ph = [n for n in bw_gm.graph.nodes if n.op == "placeholder"]
    tangents = [n for n in bw_ph if n.name.startswith("tangents")]
    if len(tangents) != sum(diff):
        raise CompileError(
            f"the joint graph has {len(tangents)} output gradients for {sum(diff)} differentiable outputs"
        )
    tensor_vals: list[torch.Tensor] = []  # per backward tensor input, its fake value
    by_name: dict[str, int] = {}
    for name in saved_names:
        by_name[name] = len(tensor_vals)
        node = next((n for n in bw_ph if n.name == name), None)
        if node is None:
            raise CompileError(f"the backward graph does not take the saved value {name}")
        tensor_vals.append(node.meta["val"])
    sym_exprs: list[Any] = []
    for node in bw_ph:
        v = node.meta.get("val")
        if isinstance(v, (torch.SymInt, int)) and not isinstance(v, bool):
            sym_exprs.append(_expr(v))
    needed: set[sympy.Symbol] = set()
    for e in sym_exprs:
        if not isinstance(e, int):
            needed |= {s for s in e.free_symbols if isinstance(s, sympy.Symbol)}

    def find(sym: sympy.Symbol, vals_: list[torch.Tensor]) -> tuple[int, int] | None:
        for i, v in enumerate(vals_):
            for d, size in enumerate(v.shape):
                if _expr(size) == sym:
                    return i, d
        return None

    tangent_vals = [n.meta["val"] for n in tangents]
    all_vals = tensor_vals + tangent_vals
    carriers: list[tuple[int, int]] = []  # (forward input, dim) whose size a carrier holds
    for sym in sorted(needed, key=str):
        if find(sym, all_vals) is not None:
            continue
        src = find(sym, vals)
        if src is None:
            raise CompileError(
                f"the backward needs the size {sym}, which no input of the forward has as a whole "
                "dimension; give that size its own Dim"
            )
        carriers.append(src)
        with fake_mode:
            tensor_vals.append(vals[src[0]].new_empty((vals[src[0]].shape[src[1]], 0)))
    n_saved = len(tensor_vals)
    all_vals = tensor_vals + tangent_vals
    sources = {}
    for sym in needed:
        src = find(sym, all_vals)
        assert src is not None
        sources[sym] = src

    slots: list[Any] = []
    t_index = 0
    for node in bw_ph:
        v = node.meta.get("val")
        if node.name.startswith("tangents"):
            slots.append(n_saved + t_index)
            t_index += 1
        elif isinstance(v, torch.Tensor):
            slots.append(by_name[node.name])
        elif isinstance(v, (torch.SymInt, int)) and not isinstance(v, bool):
            slots.append(_expr(v))
        else:
            raise CompileError(f"the backward graph takes {node.name} of type {type(v).__name__}")

    bw_out_node = next(n for n in bw_gm.graph.nodes if n.op == "output")
    bw_outs = list(bw_out_node.args[0])
    if len(bw_outs) != len(flags):
        raise CompileError(f"the backward graph returns {len(bw_outs)} gradients for {len(flags)} inputs")
    grad_inputs = [i for i, (g, f) in enumerate(zip(bw_outs, flags, strict=True)) if f and g is not None]
    absent = [i for i, (g, f) in enumerate(zip(bw_outs, flags, strict=True)) if f and g is None]
    if not grad_inputs:
        raise CompileError("no output depends differentiably on an input that requires grad")

    dims = _Dims(ep)
    fwd_mod = _Forward(fw_gm, n_fwd, saved_tensor_pos, carriers, clone_saved)
    fwd_examples = [_example(v, contiguous=False) for v in vals]
    fwd_ep = _export(fwd_mod, fwd_examples, [dims.spec(v) for v in vals], "forward")

    bwd_mod = _Backward(bw_gm, slots, sources, grad_inputs)
    bwd_examples = [_example(v, contiguous=True) for v in all_vals]
    bwd_ep = _export(bwd_mod, bwd_examples, [dims.spec(v) for v in all_vals], "backward")

    record = TrainingRecord(
        num_inputs=len(flags),
        num_outputs=n_out,
        num_saved=n_saved,
        shape_carriers=len(carriers),
        requires_grad=tuple(flags),
        differentiable_outputs=tuple(diff),
        grad_inputs=tuple(grad_inputs),
        absent_grads=tuple(absent),
        partitioner=partitioner,
        mutated=tuple(mutated),
    )
    return JointPrograms(fwd_ep, bwd_ep, record)
