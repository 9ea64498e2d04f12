"""Describe example values as manifest specs (shape, dtype, device, stride)."""

from __future__ import annotations

from typing import Any

import torch

from ..manifest import Leaf, TensorSpec


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensor_spec(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(tuple(t.shape), dtype_name(t.dtype), t.device.type, tuple(t.stride()))


_PLAIN = (bool, int, float, str, type(None))


def leaf(value: Any, where: str) -> Leaf:
    """A manifest leaf for one flattened example argument; ``where`` names it in errors."""
    if isinstance(value, torch.Tensor):
        return Leaf(tensor=tensor_spec(value))
    if isinstance(value, _PLAIN):
        return Leaf(value=value)
    raise TypeError(
        f"{where} is a {type(value).__name__}; example inputs may hold tensors, bool, int, "
        "float, str and None, in tuples, lists and dicts"
    )
