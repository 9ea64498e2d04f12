"""Run time of training entries: a forward library and a backward library joined by a
``torch.autograd.Function`` (see :mod:`aot_build.compile.joint` for how they are built, and
:class:`aot_build.manifest.TrainingRecord` for the record that connects them).

The returned outputs carry a ``grad_fn``; ``backward()`` runs the backward library and hands
each flat input that requires grad (arguments and weights alike) its gradient. Nothing here
imports a compiler: the two callables are already-loaded libraries (``runner.run``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..manifest import TrainingRecord

Program = Callable[[list[torch.Tensor]], Sequence[torch.Tensor]]


class _Plan:
    """The training record turned into indices once."""

    def __init__(self, record: TrainingRecord) -> None:
        self.num_inputs = record.num_inputs
        self.num_outputs = record.num_outputs
        self.num_saved = record.num_saved
        self.differentiable = list(record.differentiable_outputs)
        self.grad_inputs = list(record.grad_inputs)
        self.compiled_grad = set(record.grad_inputs) | set(record.absent_grads)
        #: Inputs updated in place: the forward library returns their new values first.
        self.mutated = list(record.mutated)


def _contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.is_contiguous() else t.contiguous()


def _split(plan: _Plan, flat: Sequence[torch.Tensor], outs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The forward library's outputs after the new values of updated inputs, which are copied
    into the caller's tensors (AOTAutograd returns them instead of writing them)."""
    n = len(plan.mutated)
    with torch.no_grad():
        for i, new in zip(plan.mutated, outs[:n], strict=True):
            flat[i].copy_(new)
    return list(outs[n:])


class _Joined(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, call: _Call, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        plan = call.plan
        outs = list(call.fwd(list(flat)))
        expected = len(plan.mutated) + plan.num_outputs + plan.num_saved
        if len(outs) != expected:
            raise RuntimeError(f"the forward library returned {len(outs)} tensors, expected {expected}")
        outs = _split(plan, flat, outs)
        user = outs[: plan.num_outputs]
        # the backward library was compiled for contiguous saved tensors
        saved = [_contiguous(t) for t in outs[plan.num_outputs :]]
        ctx.save_for_backward(*saved)
        ctx.call = call
        ctx.set_materialize_grads(False)
        ctx.out_meta = [
            (o.shape, o.dtype, o.device) if d else None
            for o, d in zip(user, plan.differentiable, strict=True)
        ]
        ctx.needs = [flat[i].requires_grad for i in range(len(flat))]
        nondiff = [o for o, d in zip(user, plan.differentiable, strict=True) if not d]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        return tuple(user)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:  # type: ignore[override]
        if torch.is_grad_enabled():
            raise RuntimeError(
                "a compiled aot_build training entry is differentiable once: backward with "
                "create_graph=True (double backward, gradient penalties, torch.autograd.grad(..., "
                "create_graph=True)) is not supported; call the entry's Python function "
                "(.__wrapped__) for higher-order gradients"
            )
        call: _Call = ctx.call
        plan = call.plan
        tangents: list[torch.Tensor] = []
        for g, m in zip(grad_outputs, ctx.out_meta, strict=True):
            if m is None:
                continue
            shape, dtype, device = m
            tangents.append(torch.zeros(shape, dtype=dtype, device=device) if g is None else _contiguous(g))
        saved = list(ctx.saved_tensors)
        grads = list(call.bwd(saved + tangents))
        if len(grads) != len(plan.grad_inputs):
            raise RuntimeError(
                f"the backward library returned {len(grads)} gradients, expected {len(plan.grad_inputs)}"
            )
        result: list[torch.Tensor | None] = [None] * plan.num_inputs
        for i, g in zip(plan.grad_inputs, grads, strict=True):
            if ctx.needs[i]:
                result[i] = g
        return (None, *result)


class _Call:
    """The callable :func:`training_call` returns."""

    def __init__(self, fwd: Program, bwd: Program, plan: _Plan) -> None:
        self.fwd = fwd
        self.bwd = bwd
        self.plan = plan

    def __call__(self, flat: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        plan = self.plan
        if len(flat) != plan.num_inputs:
            raise TypeError(f"the entry takes {plan.num_inputs} tensors, got {len(flat)}")
        if not torch.is_grad_enabled() or not any(t.requires_grad for t in flat):
            # nothing to differentiate: run the forward, drop what backward would need
            return _split(plan, flat, self.fwd(list(flat)))[: plan.num_outputs]
        missing = [i for i, t in enumerate(flat) if t.requires_grad and i not in plan.compiled_grad]
        if missing:
            raise RuntimeError(
                f"flat input(s) {missing} require grad, but the training artifact was compiled "
                "without their gradients; compile it with requires_grad set for them, or detach them"
            )
        return list(_Joined.apply(self, *flat))


def training_call(
    fwd: Program, bwd: Program, record: TrainingRecord
) -> Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]:
    """Join a forward and a backward library (their ``run``) into one differentiable call on
    the flat inputs (arguments, then weights); returns the user outputs, which carry a
    ``grad_fn`` when grad mode is on and some input requires grad. ``record``: the variant's
    training record (:func:`aot_build.compile.joint.export_joint` made it)."""
    return _Call(fwd, bwd, _Plan(record))
