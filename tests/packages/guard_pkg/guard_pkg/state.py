import torch
from torch import nn

from . import helpers
from .helpers import SCALE

TEMP = 2.0
NAMES = ("a", "b")


class Config:
    def __init__(self) -> None:
        self.flag = True
        self.size = 8


class Holder:
    def __init__(self) -> None:
        self.net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1)).eval()
        self.config = Config()


HOLDER = Holder()
NET = HOLDER.net
TIED = nn.Sequential(nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False))
TIED[1].weight = TIED[0].weight


def reads_everything(x: torch.Tensor) -> torch.Tensor:
    y = HOLDER.net(x) * TEMP
    if HOLDER.config.flag and not hasattr(HOLDER.config, "missing"):
        y = y + helpers.SCALE
    return y * SCALE


def reads_tied(x: torch.Tensor) -> torch.Tensor:
    return TIED(x)
