"""Keyword arguments, defaults, several input sets, structured outputs."""

import dataclasses
from typing import NamedTuple

import torch
from torch.export import Dim

from aot_build import aot_entry


@aot_entry(
    example_inputs=lambda: [(torch.randn(4, 8),), (torch.randn(4, 8), torch.ones(4, 8))],
    dynamic_shapes=[
        ({0: Dim("n", min=2, max=32)},),
        ({0: Dim("n", min=2, max=32)}, {0: Dim("n", min=2, max=32)}),
    ],
)
def masked(x: torch.Tensor, mask: torch.Tensor | None = None, scale: float = 1.0) -> torch.Tensor:
    y = x.softmax(dim=-1) * scale
    return y if mask is None else y * mask


@aot_entry(
    example_inputs=[(torch.randn(3, 5),), (torch.randn(3, 5, dtype=torch.float64),), (torch.randn(2, 3, 5),)]
)
def by_dtype(x: torch.Tensor) -> torch.Tensor:
    return x.cumsum(dim=-1)


class Stats(NamedTuple):
    mean: torch.Tensor
    count: int


@dataclasses.dataclass
class Result:
    value: torch.Tensor
    label: str
    extra: float


@aot_entry(example_inputs=lambda: (torch.randn(4, 6),))
def plain_outputs(x: torch.Tensor) -> tuple[torch.Tensor, int, None, str, float]:
    return x * 2, 3, None, "done", 2.5


@aot_entry(example_inputs=lambda: (torch.randn(4, 6),), dynamic_shapes=({0: Dim("rows", min=2, max=16)},))
def structured(x: torch.Tensor) -> dict[str, object]:
    return {
        "stats": Stats(x.mean(dim=0), x.shape[0]),
        "result": Result(x.exp(), "exp", 0.5),
        "same": x,
        "list": [x.sum(), [x.max()]],
    }
