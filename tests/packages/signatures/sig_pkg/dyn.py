"""Dynamic dimensions: ranges that include 1, shared dims, derived dims, size-1 traps."""

import torch
from torch.export import Dim

from aot_build import aot_entry

torch.manual_seed(0)
WEIGHT = torch.randn(16)
BATCH = Dim("batch", min=1, max=64)
SEQ = Dim("seq", min=1, max=128)


@aot_entry(example_inputs=lambda: (torch.randn(4, 16),), dynamic_shapes=({0: BATCH},))
def scale_rows(x: torch.Tensor) -> torch.Tensor:
    return x * WEIGHT + x.sum(dim=0, keepdim=True)


@aot_entry(
    example_inputs=lambda: (torch.randn(3, 10, 8), torch.ones(3, 10)),
    dynamic_shapes=({0: BATCH, 1: SEQ}, {0: BATCH, 1: SEQ}),
)
def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    m = mask.unsqueeze(-1)
    return (x * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)


@aot_entry(example_inputs=lambda: (torch.randn(4, 8),), dynamic_shapes=({0: BATCH},))
def squeeze_trap(x: torch.Tensor) -> torch.Tensor:
    # at batch 1 eager squeezes the batch dimension away; a dynamic artifact would not
    return x.squeeze() * 2


@aot_entry(example_inputs=lambda: (torch.randn(4, 8),), dynamic_shapes=({0: BATCH},))
def branch_on_one(x: torch.Tensor) -> torch.Tensor:
    if x.shape[0] == 1:
        return x * 2
    return x * 3


@aot_entry(
    example_inputs=lambda: (torch.randn(4, 8), torch.randn(8, 8)),
    dynamic_shapes=({0: BATCH}, {0: 2 * BATCH}),
)
def doubled(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, x]) + y


@aot_entry(example_inputs=lambda: (torch.randn(6, 8),), dynamic_shapes=({0: Dim.AUTO},))
def auto_dim(x: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) - x.mean()
