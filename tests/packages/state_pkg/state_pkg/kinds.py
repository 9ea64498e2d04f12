import abc
import collections
import functools
import math
import os
import types

import numpy as np
import torch
from torch import nn

from aot_build import aot_entry

from . import extras

torch.manual_seed(0)  # the same weights in every process: a failure reproduces


def make_scaler(z: float):  # a factory-made helper: its closure cell changes through nonlocal
    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * z

    def set_z(v: float) -> None:
        nonlocal z
        z = v

    return scale, set_z


SCALER, SET_Z = make_scaler(2.0)


class Const:  # a constants class
    K = 3.0


class AttrDict(dict):  # EasyDict-style config
    def __getattr__(self, key: str):
        try:
            return self[key]
        except KeyError as exc:
            raise AttributeError(key) from exc


class Gate(nn.Module):
    BIAS = 0.5

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    @aot_entry(example_inputs=lambda: (Gate().eval(), torch.randn(4, 8)))
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.lin(x)) * type(self).BIAS


NS = types.SimpleNamespace(scale=1.5)
CFG = AttrDict(shift=0.25, act="gelu")
OD = collections.OrderedDict(gain=1.0)
MIXED = {"net": nn.Linear(8, 8).requires_grad_(False), "alpha": 0.5}
FLAGS = {"clip"}
NP_SCALE = np.float32(2.0)
ACTS = {"gelu": torch.nn.functional.gelu, "relu": torch.relu}
CLAMP = functools.partial(torch.clamp, min=-1.0)
GATE = Gate().eval().requires_grad_(False)  # inference weights: calls with grad on run compiled
CACHE_K = 4.0


class Scaling(abc.ABC):
    @abc.abstractmethod
    def scale(self, x: torch.Tensor) -> torch.Tensor: ...


class Doubling:
    def scale(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


STEP = Doubling()


@functools.lru_cache
def cached(n: int) -> float:
    return n * CACHE_K


ZERO = 0.0  # its sign matters: copysign, x / ZERO


def offset(y: torch.Tensor) -> torch.Tensor:  # a helper whose code a reload replaces
    return y + 0.5


@aot_entry(example_inputs=lambda: (torch.randn(4, 8),))
def reads_state(x: torch.Tensor) -> torch.Tensor:
    y = GATE.lin(x) * Const.K * NS.scale + CFG.shift
    y = ACTS[CFG.act](y) * OD["gain"]
    y = MIXED["net"](y) * MIXED["alpha"]
    if "clip" in FLAGS:
        y = CLAMP(y)
    y = SCALER(y) * NP_SCALE
    if os.environ.get("STATE_PKG_SHIFT") == "1":
        y = y + 1
    if torch.are_deterministic_algorithms_enabled():  # global torch state
        y = y - 1
    if torch.is_grad_enabled():  # answered while tracing (under no_grad)
        y = y * 0.5
    if torch.cuda.is_available():  # the machine's state, answered while tracing
        y = y + 2
    if isinstance(STEP, Scaling):  # answered by the ABC's registry
        y = y * 1.5
    if os.getenv("STATE_PKG_DOUBLE") == "1":  # os.environ, read by the standard library's code
        y = y * 2
    y = offset(y) * getattr(extras, "GAIN", 1.0) * math.copysign(1.0, ZERO)  # an optional attribute
    return y * cached(2)


_LAZY: dict[int, float] = {}


def lazy(k: int) -> float:  # a global table filled on first use
    if k not in _LAZY:
        _LAZY[k] = k * Const.K
    return _LAZY[k]


@aot_entry(example_inputs=lambda: (torch.randn(4, 8),))
def reads_lazy(x: torch.Tensor) -> torch.Tensor:
    return x * lazy(3)
