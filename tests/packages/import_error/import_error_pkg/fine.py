import torch

from aot_build import aot_entry


@aot_entry(example_inputs=lambda: (torch.randn(4),))
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2
