"""A small inference package: a pre-processing step, an MLP block and an attention block."""

from .blocks import ATTENTION, MLP, attention_block, mlp_block
from .preprocess import normalize, split_heads_stats

__all__ = ["ATTENTION", "MLP", "attention_block", "mlp_block", "normalize", "split_heads_stats"]
