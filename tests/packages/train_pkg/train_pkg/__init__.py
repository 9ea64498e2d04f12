"""Training entries (``backward=True``): a loss over a module global's parameters, with a
dynamic batch, and a method entry whose gradients go to the instance's parameters."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aot_build import aot_entry

torch.manual_seed(0)
ENCODER = torch.nn.Sequential(
    torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.Linear(32, 5)
)


def _batch() -> tuple[dict[int, object], dict[int, object]]:
    batch = torch.export.Dim("batch", min=2, max=64)
    return ({0: batch}, {0: batch})


@aot_entry(
    example_inputs=lambda: (torch.randn(8, 16), torch.randint(0, 5, (8,))),
    dynamic_shapes=_batch,
    backward=True,
)
def loss(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the encoder's logits: a scalar to call .backward() on."""
    return F.cross_entropy(ENCODER(x), target)


class Block(torch.nn.Module):
    """Residual MLP block; ``forward`` is a training entry."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)

    @aot_entry(example_inputs=lambda: (Block(), torch.randn(4, 10, 16)), backward=True)
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def _rows() -> tuple[dict[int, object]]:
    return ({0: torch.export.Dim("rows", min=2, max=64)},)


@aot_entry(example_inputs=lambda: (torch.randn(8, 16),), dynamic_shapes=_rows, backend="dynamo")
def embed(x: torch.Tensor) -> torch.Tensor:
    """Built by the ``dynamo`` backend (upstream precompile): loading it needs a C++ compiler."""
    return ENCODER(x).tanh()


@aot_entry(
    example_inputs=lambda: (torch.randn(8, 16), torch.randint(0, 5, (8,))),
    dynamic_shapes=_batch,
    backend="dynamo",
    backward=True,
)
def dynamo_loss(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """A training entry built by the ``dynamo`` backend (gradients for the encoder's weights)."""
    return F.cross_entropy(ENCODER(x), target)
