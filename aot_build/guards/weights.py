"""Run side: the weights a variant passes to its library, read by path once and kept.

Reading a hundred weights by path on every call costs more than the check itself, so the
tensors are read when the entry is bound, checked against the manifest (shape, dtype, device,
strides, whether it is an ``nn.Parameter``), and kept: per instance for a method entry. On
every call the guard tree checks that each path still holds the very tensor kept (``weight``
checks; a replaced weight fails there and is read again), and one C++ call (torch's
``TensorGuards``) that the kept tensors still have the metadata they were verified with
(``model.half()`` and ``param.data = ...`` change a tensor in place).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import Any

import torch

from ..records import record
from .paths import PathError
from .tree import TensorSpec

_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)


@record
class Held:
    """Verified weights: the tensors, their metadata checker, and whether any needs grad."""

    tensors: tuple[Any, ...]
    metadata: Any
    need_grad: bool


class WeightCache:
    """Weights per instance (method entries) or for the whole process (functions).

    Args:
        specs: the manifest's spec of each weight.
        labels: gives the first path of each weight, for messages (called when first needed).
        gather: ``gather(self_obj) -> tensors``: each weight read by its path now.
    """

    def __init__(self, specs: list[TensorSpec], labels: Callable[[], list[str]], gather: Any) -> None:
        self.specs = specs
        self._labels = labels
        self._gather = gather
        self._shared: Held | None = None
        self._by_instance: weakref.WeakKeyDictionary[Any, Held] = weakref.WeakKeyDictionary()

    @functools.cached_property
    def labels(self) -> list[str]:
        return self._labels()

    def get(self, self_obj: Any) -> Held | None:
        """The weights held for ``self_obj`` (None: not read yet)."""
        if self_obj is None:
            return self._shared
        try:
            return self._by_instance.get(self_obj)
        except TypeError:  # not weak-referenceable
            return None

    def read(self, self_obj: Any) -> Held | str:
        """Read every weight by its path now and verify it; the held weights, or what is wrong."""
        try:
            tensors = self._gather(self_obj)
        except PathError as exc:
            return f"a weight no longer exists ({exc})"
        for i, (t, spec) in enumerate(zip(tensors, self.specs, strict=True)):
            problem = weight_problem(t, spec)
            if problem:
                return f"weight {self.labels[i]} {problem}"
        held = Held(tuple(tensors), tensor_guards(tuple(tensors)), any(t.requires_grad for t in tensors))
        if self_obj is None:
            self._shared = held
        else:
            try:
                self._by_instance[self_obj] = held
            except TypeError:
                pass
        return held


class _PythonTensorGuards:
    """Stand-in for torch's C++ TensorGuards: the same facts, checked in Python."""

    def __init__(self, *tensors: torch.Tensor) -> None:
        self.facts = [(t.dtype, t.device, t.shape, t.stride(), t.requires_grad) for t in tensors]

    def check(self, *tensors: torch.Tensor) -> bool:
        return len(tensors) == len(self.facts) and all(
            (t.dtype, t.device, t.shape, t.stride(), t.requires_grad) == f
            for t, f in zip(tensors, self.facts, strict=True)
        )


def tensor_guards(tensors: tuple[torch.Tensor, ...]) -> Any:
    """A fast checker that ``tensors`` keep their current metadata."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        sizes: list[Any] = [list(t.shape) for t in tensors]
        strides: list[Any] = [list(t.stride()) for t in tensors]
        return TensorGuards(*tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)
    except (ImportError, TypeError, RuntimeError):
        return _PythonTensorGuards(*tensors)


def weight_problem(t: Any, spec: TensorSpec) -> str | None:
    """What makes ``t`` unusable as a weight compiled for ``spec`` (None: it fits)."""
    if type(t) not in _TENSOR_TYPES:
        return f"is a {type(t).__name__}, compiled for a tensor"
    if t.layout != torch.strided:  # sparse, mkldnn: no strides to compare
        return f"has layout {t.layout}, compiled for torch.strided"
    if t.is_neg():  # a lazily negated view (.conj().imag): the library would read it unnegated
        return "is a negated view (its neg bit is set), compiled for a plain tensor: call .resolve_neg()"
    if spec.parameter is not None and isinstance(t, torch.nn.Parameter) != spec.parameter:
        compiled = "an nn.Parameter" if spec.parameter else "a plain tensor"
        return f"is a {type(t).__name__}, compiled for {compiled}"
    if tuple(t.shape) != spec.shape or str(t.dtype)[6:] != spec.dtype:
        return f"is {tuple(t.shape)} {str(t.dtype)[6:]}, compiled for {spec.shape} {spec.dtype}"
    if t.device.type != spec.device:
        return f"is on {t.device}, compiled for {spec.device}"
    if t.stride() != spec.stride and not (spec.stride == _contiguous(spec.shape) and t.is_contiguous()):
        return f"has strides {t.stride()}, compiled for {spec.stride}"
    return None


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))
