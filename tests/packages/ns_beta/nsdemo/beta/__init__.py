"""Second distribution of the nsdemo namespace."""

import torch

from aot_build import aot_entry

SHIFT = torch.linspace(-1.0, 1.0, 8)


@aot_entry(example_inputs=lambda: (torch.randn(4, 8),))
def shifted(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x + SHIFT) * 2.0
