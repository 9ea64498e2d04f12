import functools

import torch

from aot_build import aot_entry


def scale(k: float, x: torch.Tensor) -> torch.Tensor:
    return x * k


double = aot_entry(functools.partial(scale, 2.0), example_inputs=(torch.zeros(2),))
