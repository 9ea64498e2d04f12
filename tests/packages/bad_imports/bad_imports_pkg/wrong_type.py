import torch

from aot_build import aot_entry


@aot_entry(example_inputs={"x": torch.zeros(2)})  # a dict, not a tuple of arguments
def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * 2
