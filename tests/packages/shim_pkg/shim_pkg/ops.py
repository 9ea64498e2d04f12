import torch
from torch import nn

from aot_build import aot_entry

torch.manual_seed(0)

#: A plain tensor global and an nn.Module global: both must be lifted to artifact inputs.
SCALE = torch.tensor(2.0)
LINEAR = nn.Linear(8, 8).eval().requires_grad_(False)


def _example() -> tuple[torch.Tensor, int]:
    return (torch.randn(4, 8), 3)


@aot_entry(example_inputs=_example)
def affine(x: torch.Tensor, k: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Several outputs, a baked-in int argument, two kinds of weights."""
    return LINEAR(x) * SCALE + k, {"total": x.sum(dim=-1)}


@aot_entry(example_inputs=lambda: (torch.randn(2048, 512),))
def energy(x: torch.Tensor) -> torch.Tensor:
    """A whole-tensor reduction big enough that Inductor splits it across threads."""
    return (x * x).sum() + x.softmax(-1).amax()
