import torch

from aot_build import aot_entry


def make():
    @aot_entry(example_inputs=(torch.zeros(2),))
    def inner(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    return inner


inner = make()
