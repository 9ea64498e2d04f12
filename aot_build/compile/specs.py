"""Describe example values as manifest specs (shape, dtype, device, stride)."""

from __future__ import annotations

import torch

from ..manifest import TensorSpec


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensor_spec(t: torch.Tensor) -> TensorSpec:
    parameter = isinstance(t, torch.nn.Parameter)
    return TensorSpec(tuple(t.shape), dtype_name(t.dtype), t.device.type, tuple(t.stride()), parameter)
