"""Entries built by a third-party backend (the project's ``backend``) and by ``aoti`` (per entry)."""

from __future__ import annotations

import torch

from aot_build import aot_entry

torch.manual_seed(0)
MODEL = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).eval()


def _examples() -> tuple[torch.Tensor]:
    return (torch.randn(8, 16),)


def _batch() -> dict[int, object]:
    return {0: torch.export.Dim("batch", min=2, max=64)}


@aot_entry(example_inputs=_examples, dynamic_shapes=lambda: (_batch(),))
def head(x: torch.Tensor) -> torch.Tensor:
    """Built by the project's backend, ``exported``."""
    return MODEL(x).softmax(-1)


@aot_entry(example_inputs=_examples, backend="aoti")
def scores(x: torch.Tensor) -> torch.Tensor:
    """Built by ``aoti`` whatever the project's backend."""
    return MODEL(x).amax(-1)
