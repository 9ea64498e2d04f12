"""Entries that update state in place: module buffers (BatchNorm in train mode, a KV cache),
parameters (an EMA, a whole SGD step) and their arguments (``out=``, normalizing in place)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from aot_build import aot_entry

torch.manual_seed(0)
DIM = 8
MAX_LEN = 16

#: BatchNorm in train mode: each call moves running_mean/var and num_batches_tracked.
NET = torch.nn.Sequential(torch.nn.Linear(DIM, DIM), torch.nn.BatchNorm1d(DIM), torch.nn.ReLU())
NET.train()


@aot_entry(example_inputs=lambda: (torch.randn(4, DIM),))
def bn_forward(x: torch.Tensor) -> torch.Tensor:
    """Train-mode forward (call under torch.no_grad()): normalizes by the batch's statistics
    and updates the running ones."""
    return NET(x)


#: BatchNorm in train mode in a training entry: gradients, and the running statistics move.
BN_NET = torch.nn.Sequential(
    torch.nn.Linear(DIM, DIM), torch.nn.BatchNorm1d(DIM), torch.nn.Tanh(), torch.nn.Linear(DIM, 1)
)
BN_NET.train()


@aot_entry(example_inputs=lambda: (torch.randn(6, DIM), torch.randn(6, 1)), backward=True)
def bn_loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A loss to call .backward() on; each call updates BN_NET's running statistics."""
    return F.mse_loss(BN_NET(x), y)


#: A static KV cache, written at one position per decode step.
K_CACHE = torch.zeros(MAX_LEN, DIM)
V_CACHE = torch.zeros(MAX_LEN, DIM)
PROJ = torch.nn.Linear(DIM, 3 * DIM)


@aot_entry(example_inputs=lambda: (torch.randn(1, DIM), torch.tensor([0])))
def decode(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """One decode step: the token's key and value go into the caches at ``pos`` (a 1-element
    int64 tensor); the query attends to positions 0..pos."""
    q, k, v = PROJ(x).chunk(3, dim=-1)
    K_CACHE.index_copy_(0, pos, k)
    V_CACHE.index_copy_(0, pos, v)
    visible = torch.arange(MAX_LEN) <= pos
    scores = (q @ K_CACHE.T) / DIM**0.5
    scores = scores.masked_fill(~visible, float("-inf"))
    return scores.softmax(-1) @ V_CACHE


#: A model and its exponential moving average.
MODEL = torch.nn.Linear(DIM, DIM)
EMA = torch.nn.Linear(DIM, DIM)
EMA.load_state_dict(MODEL.state_dict())
EMA.requires_grad_(False)


@aot_entry(example_inputs=lambda: (0.9,))
def ema_update(decay: float) -> None:
    """EMA ← decay·EMA + (1 − decay)·MODEL, in place; returns None."""
    for e, p in zip(EMA.parameters(), MODEL.parameters(), strict=True):
        e.mul_(decay).add_(p.detach(), alpha=1 - decay)


#: A small regression model trained by a compiled SGD step.
REGRESSOR = torch.nn.Sequential(torch.nn.Linear(DIM, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


@aot_entry(example_inputs=lambda: (torch.randn(8, DIM), torch.randn(8, 1), 0.05))
def sgd_step(x: torch.Tensor, y: torch.Tensor, lr: float) -> torch.Tensor:
    """A whole training step: loss, gradients by torch.autograd.grad, parameters updated in
    place. Call under torch.no_grad(); returns the loss (detached)."""
    params = list(REGRESSOR.parameters())
    with torch.enable_grad():
        loss = F.mse_loss(REGRESSOR(x), y)
        grads = torch.autograd.grad(loss, params)
    with torch.no_grad():
        for p, g in zip(params, grads, strict=True):
            p.sub_(lr * g)
    return loss.detach()


@aot_entry(example_inputs=lambda: (torch.randn(4, DIM), torch.randn(4, DIM), torch.empty(4, DIM)))
def add_out(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out=`` style: writes a·b + a into ``out`` and returns it."""
    torch.addcmul(a, a, b, out=out)
    return out


@aot_entry(example_inputs=lambda: (torch.randn(4, DIM),))
def normalize_(x: torch.Tensor) -> torch.Tensor:
    """Normalizes ``x`` in place (zero mean, unit variance per row) and returns it."""
    x.sub_(x.mean(-1, keepdim=True)).div_(x.std(-1, keepdim=True))
    return x
