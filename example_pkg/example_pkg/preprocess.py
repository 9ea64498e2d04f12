"""Pre-processing: plain tensor code, no weights."""

import torch

from aot_build import aot_entry


@aot_entry(example_inputs=lambda: (torch.rand(8, 3, 64, 64) * 255,))
def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8-range images to zero-mean, unit-variance floats per channel."""
    mean = torch.tensor([123.7, 116.3, 103.5]).view(1, 3, 1, 1)
    std = torch.tensor([58.4, 57.1, 57.4]).view(1, 3, 1, 1)
    return (images - mean) / std


@aot_entry(example_inputs=lambda: (torch.randn(4, 32, 64), 4))
def split_heads_stats(x: torch.Tensor, heads: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Split features into heads; return them with per-head statistics (several outputs)."""
    b, t, d = x.shape
    h = x.view(b, t, heads, d // heads).transpose(1, 2)
    return h, {"mean": h.mean(dim=(-1, -2)), "rms": h.pow(2).mean(dim=(-1, -2)).sqrt()}
