"""torch's scaled-dot-product-attention (SDPA) backend flags: which kernel
``F.scaled_dot_product_attention`` runs.

Eager chooses SDPA's kernel on every call from process-wide flags
(``torch.backends.cuda.enable_flash_sdp(False)``, ``enable_math_sdp``, ...; the
``torch.nn.attention.sdpa_kernel(...)`` context manager sets them for a block): on CPU the
flash kernel or the math path, whose results differ by rounding; with every backend off it
raises. A compiled program made that choice once, when it was compiled. So the build records,
per variant whose graph calls an operator that chooses so, the flags it was compiled under
(the manifest's ``sdpa``); the shim compares them on each call of that variant only
(:class:`FlagCheck`), and falls back, naming the flag and the fix, while one differs.

The build's compile workers are fresh interpreters, which have torch's defaults
(:data:`FLAGS`); the build refuses an SDPA entry traced under other flags
(:func:`compiled_flags`): its artifact would be compiled under the defaults, not under the
flags its record would carry.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch

from .errors import CompileError
from .records import TupleRecord

if sys.version_info >= (3, 11):
    from operator import call as _call
else:

    def _call(read: Callable[[], Any]) -> Any:
        return read()


class Flag(TupleRecord):
    """One flag: its name in the manifest (torch's getter, without ``_get_``), how to read it,
    its value in a fresh interpreter, what sets it and what restores it."""

    name: str
    read: Callable[[], Any]
    default: Any
    set_by: str
    fix: str


_BLOCK = "or a torch.nn.attention.sdpa_kernel(...) block"


def _switch(backend: str, setter: str, default: bool) -> Flag | None:
    """The on/off flag of ``backend`` (``flash``): None when this torch has none."""
    getter = getattr(torch._C, f"_get_{backend}_sdp_enabled", None)
    if getter is None:
        return None
    return Flag(
        f"{backend}_sdp_enabled",
        getter,
        default,
        f"{setter}({not default}), {_BLOCK}",
        f"{setter}({default}), or call outside the sdpa_kernel block",
    )


def _flags() -> tuple[Flag, ...]:
    cuda = "torch.backends.cuda"
    found = [
        _switch("flash", f"{cuda}.enable_flash_sdp", True),
        _switch("mem_efficient", f"{cuda}.enable_mem_efficient_sdp", True),
        _switch("math", f"{cuda}.enable_math_sdp", True),
        _switch("cudnn", f"{cuda}.enable_cudnn_sdp", True),
        _switch("fa3", "torch._C._set_sdp_use_fa3", False),
        _switch("overrideable", "torch._C._set_sdp_use_overrideable", True),
    ]
    reduction = getattr(torch._C, "_get_math_sdp_allow_fp16_bf16_reduction", None)
    if reduction is not None:
        setter = f"{cuda}.allow_fp16_bf16_reduction_math_sdp"
        found.append(
            Flag(
                "math_sdp_allow_fp16_bf16_reduction", reduction, False, f"{setter}(True)", f"{setter}(False)"
            )
        )
    order = getattr(torch._C, "_get_sdp_priority_order", None)
    if order is not None:
        found.append(
            Flag(
                "sdp_priority_order",
                order,
                [1, 2, 0, 3, 4],  # flash, efficient, math, cudnn, overrideable
                "torch.nn.attention.sdpa_kernel(..., set_priority=True)",
                "call outside that sdpa_kernel block",
            )
        )
    return tuple(f for f in found if f is not None)


#: Every SDPA flag this torch has (torch 2.13: flash, mem_efficient, math, cudnn, fa3 and
#: overrideable on/off, the math kernel's fp16/bf16 reduction, the backends' priority order).
FLAGS = _flags()

#: Operators that choose their attention kernel by the flags when they run (torch's CPU and
#: CUDA ``_fused_sdp_choice``); those that name their kernel (``_scaled_dot_product_*``) do not.
CHOOSING = frozenset(
    {
        "aten::scaled_dot_product_attention",
        "aten::_fused_sdp_choice",
        "aten::_native_multi_head_attention",
        "aten::_transformer_encoder_layer_fwd",
    }
)


def current() -> dict[str, Any]:
    """Every flag's value now, by name."""
    return {f.name: f.read() for f in FLAGS}


def uses_sdpa(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` (or a graph nested in it: a ``cond`` branch) calls an operator that
    chooses its kernel by the flags."""
    return any(
        n.op == "call_function"
        and isinstance(n.target, torch._ops.OpOverload)
        and n.target._schema.name in CHOOSING
        for m in gm.modules()
        if isinstance(m, torch.fx.GraphModule)
        for n in m.graph.nodes
    )


def compiled_flags(gm: torch.fx.GraphModule, where: str) -> dict[str, Any]:
    """The manifest's ``sdpa`` record of a variant whose program is ``gm``: the flags, when it
    calls SDPA, else ``{}`` (its calls check none). CompileError when a flag is not torch's
    default (set while importing the package): the compile workers would not see it."""
    if not uses_sdpa(gm):
        return {}
    flags = current()
    for f in FLAGS:
        if flags[f.name] != f.default:
            raise CompileError(
                f"{where}: calls scaled_dot_product_attention while the SDPA flag {f.name} is "
                f"{flags[f.name]}, not torch's default {f.default} ({f.set_by}, run while "
                "importing the package?); artifacts are compiled with torch's defaults, and the "
                "shim runs them only under the flags they were compiled with.\n  set the flag in "
                "the code that uses the package, not at import"
            )
    return flags


#: Stands for a flag the record lacks: equal to no value.
_UNRECORDED: Any = object()


class FlagCheck:
    """The per-call check of a variant compiled under ``recorded`` (its manifest ``sdpa``):
    every flag read and compared at once (~0.3 µs)."""

    def __init__(self, recorded: Mapping[str, Any]) -> None:
        self.reads = tuple(f.read for f in FLAGS)
        self.expected = tuple(recorded.get(f.name, _UNRECORDED) for f in FLAGS)
        #: Names the record and this torch do not share (a record from another torch release;
        #: the shim loads none): such a variant's every call falls back.
        self.unshared = sorted(set(recorded) ^ {f.name for f in FLAGS})

    def changed(self) -> str | None:
        """None while every flag is as compiled; else the name of the first that differs (or
        of one :attr:`unshared`)."""
        if not self.unshared and tuple(map(_call, self.reads)) == self.expected:
            return None
        if self.unshared:
            return self.unshared[0]
        # None again when another thread restored the flag meanwhile
        return next((f.name for f, want in zip(FLAGS, self.expected, strict=True) if f.read() != want), None)

    def explain(self, name: str) -> str:
        """Why a call with flag ``name`` changed runs as Python, and the fix."""
        if name in self.unshared:
            return (
                f"its record and this torch do not share the SDPA flag {name} (built with another "
                "torch); rebuild the wheel"
            )
        i = next(i for i, f in enumerate(FLAGS) if f.name == name)
        flag = FLAGS[i]
        return (
            f"the scaled-dot-product-attention flag {name} is {flag.read()}, compiled with "
            f"{self.expected[i]} ({flag.set_by}): eager would choose another attention kernel. "
            f"Restore it: {flag.fix}"
        )
