"""Package state the entries read besides tensors: each must be guarded per call."""

import torch
from torch import nn

from aot_build import aot_entry

from . import helpers
from .helpers import SCALE

torch.manual_seed(0)

TEMP = 2.0
MODE = "tanh"


class Act(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.kind = "tanh"
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return torch.tanh(y) if self.kind == "tanh" else torch.sigmoid(y)


class Pipeline:
    """A plain object holding modules, as pipelines do."""

    def __init__(self) -> None:
        self.unet = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
        self.steps = 3


ACT = Act().eval()
SEQ = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
TIED = nn.Sequential(nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False)).eval()
TIED[1].weight = TIED[0].weight
PIPE = Pipeline()
UNET = PIPE.unet
DROP = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).eval()
NORM = nn.LayerNorm(8)


def _x() -> tuple[torch.Tensor]:
    return (torch.randn(4, 8),)


@aot_entry(example_inputs=_x)
def scaled(x: torch.Tensor) -> torch.Tensor:
    return x * TEMP if MODE == "tanh" else x


@aot_entry(example_inputs=_x)
def act(x: torch.Tensor) -> torch.Tensor:
    return ACT(x)


@aot_entry(example_inputs=_x)
def seq(x: torch.Tensor) -> torch.Tensor:
    return SEQ(x)


@aot_entry(example_inputs=_x)
def tied(x: torch.Tensor) -> torch.Tensor:
    return TIED(x)


@aot_entry(example_inputs=_x)
def pipe(x: torch.Tensor) -> torch.Tensor:
    out = x
    for _ in range(PIPE.steps):
        out = PIPE.unet(out)
    return out


@aot_entry(example_inputs=_x)
def two_scales(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE + x * helpers.SCALE


@aot_entry(example_inputs=_x)
def attr_scale(x: torch.Tensor) -> torch.Tensor:
    # names SCALE only as an attribute: the global SCALE of this module is not read
    return x * helpers.SCALE


@aot_entry(example_inputs=_x)
def dropped(x: torch.Tensor) -> torch.Tensor:
    return DROP(x)


@aot_entry(example_inputs=_x)
def normed(x: torch.Tensor) -> torch.Tensor:
    return NORM(x)
