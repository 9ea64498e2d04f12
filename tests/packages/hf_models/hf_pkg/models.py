import torch
from torch.export import Dim
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel
from transformers.modeling_outputs import BaseModelOutputWithPoolingAndCrossAttentions

from aot_build import aot_entry

torch.manual_seed(0)

BERT = BertModel(
    BertConfig(
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
    )
).eval()
GPT2 = GPT2LMHeadModel(
    GPT2Config(vocab_size=1000, n_embd=64, n_layer=1, n_head=4, n_positions=128, use_cache=False)
).eval()

BATCH = Dim("batch", min=1, max=16)
SEQ = Dim("seq", min=1, max=64)


def _ids(batch: int = 2, seq: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, 1000, (batch, seq))
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, -3:] = 0
    return ids, mask


@aot_entry(example_inputs=_ids, dynamic_shapes=({0: BATCH, 1: SEQ}, {0: BATCH, 1: SEQ}))
def encode(
    input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> BaseModelOutputWithPoolingAndCrossAttentions:
    """BERT encoder: the library's own output object comes back."""
    return BERT(input_ids=input_ids, attention_mask=attention_mask)


@aot_entry(example_inputs=lambda: (torch.randint(0, 1000, (2, 10)),), dynamic_shapes=({0: BATCH, 1: SEQ},))
def next_token_logits(input_ids: torch.Tensor) -> torch.Tensor:
    """GPT-2 (tied input/output embeddings): logits of the last position."""
    return GPT2(input_ids=input_ids).logits[:, -1, :]
