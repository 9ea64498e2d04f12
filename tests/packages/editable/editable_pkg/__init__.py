"""Sample project installed with ``pip install -e``: entries run as plain Python."""

import torch

from aot_build import aot_entry

WEIGHT = torch.full((4,), 3.0)


@aot_entry(example_inputs=lambda: (torch.randn(4),))
def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * WEIGHT
