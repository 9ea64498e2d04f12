import torch

from aot_build import aot_entry


@aot_entry(example_inputs=lambda: (torch.randn(16),))
def branchy(x: torch.Tensor) -> torch.Tensor:
    if x.sum() > 0:  # data-dependent Python branch: torch.export cannot trace it
        return x * 2
    return x - 1
