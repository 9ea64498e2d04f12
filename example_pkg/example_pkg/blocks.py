"""Model blocks held in module globals, as inference packages usually hold them.

Users may load their own checkpoint into MLP / ATTENTION (``load_state_dict``); the shipped
artifacts read the current weights on every call.
"""

import torch
from torch import nn

from aot_build import aot_entry

torch.manual_seed(0)

D_MODEL = 64
SEQ = 32
BATCH = 4


class MLPBlock(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, hidden)
        self.down = nn.Linear(hidden, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


class AttentionBlock(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(y.transpose(1, 2).reshape(b, t, d))


MLP = MLPBlock(D_MODEL, 4 * D_MODEL).eval().requires_grad_(False)
ATTENTION = AttentionBlock(D_MODEL, heads=4).eval().requires_grad_(False)
#: Output temperature, a plain tensor global; users may change it.
TEMPERATURE = torch.tensor(1.0)


def _example() -> tuple[torch.Tensor]:
    return (torch.randn(BATCH, SEQ, D_MODEL),)


def _dynamic_batch() -> tuple[dict[int, object]]:
    """Any batch size from 1 to 64 runs compiled (size 1 by its own artifact, built
    automatically). A callable, like example_inputs: torch.export.Dim imports sympy, which
    importing this package then never does."""
    from torch.export import Dim

    return ({0: Dim("batch", min=1, max=64)},)


@aot_entry(example_inputs=_example, dynamic_shapes=_dynamic_batch)
def mlp_block(x: torch.Tensor) -> torch.Tensor:
    """One pre-norm MLP block."""
    return MLP(x)


@aot_entry(example_inputs=_example, dynamic_shapes=_dynamic_batch)
def attention_block(x: torch.Tensor) -> torch.Tensor:
    """Causal self-attention followed by the MLP block, scaled by TEMPERATURE."""
    return MLP(ATTENTION(x)) / TEMPERATURE
