import torch

from aot_build import aot_entry


@aot_entry(example_inputs=(torch.zeros(2),))
def twin(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@aot_entry(example_inputs=(torch.zeros(2),))
def twin(x: torch.Tensor) -> torch.Tensor:  # noqa: F811 - the mistake under test
    return x * 3
