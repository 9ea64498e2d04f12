"""Entries that reach the SCALE global only through helpers in another module."""

import torch

from aot_build import aot_entry
from srcpkg import helpers
from srcpkg.helpers import scale_shift


def _example() -> tuple[torch.Tensor]:
    return (torch.randn(4, 8),)


@aot_entry(example_inputs=_example)
def fused(x: torch.Tensor) -> torch.Tensor:
    """Through a module attribute: ``helpers.scale_shift``."""
    return torch.relu(helpers.scale_shift(x))


@aot_entry(example_inputs=_example)
def fused_direct(x: torch.Tensor) -> torch.Tensor:
    """Through a function imported by name."""
    return torch.tanh(scale_shift(x))
