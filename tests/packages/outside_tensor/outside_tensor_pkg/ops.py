import torch

from aot_build import aot_entry


class Config:
    """A plain object holding a tensor: not a module global, not an nn.Module."""

    def __init__(self) -> None:
        self.scale = torch.full((4,), 2.0)


CONFIG = Config()


@aot_entry(example_inputs=lambda: (torch.randn(4),))
def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * CONFIG.scale
