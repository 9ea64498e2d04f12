"""First distribution of the nsdemo namespace."""

import torch

from aot_build import aot_entry

SCALE = torch.linspace(0.5, 1.5, 8)


@aot_entry(example_inputs=lambda: (torch.randn(4, 8),))
def scaled(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x * SCALE) + 1.0
