"""One entry, three CPU targets. The bfloat16 round trip tempts Inductor into the build
host's AVX-512 BF16 instructions, which the cpu-avx512 target must not contain."""

import torch

from aot_build import aot_entry

torch.manual_seed(0)
PROJ = torch.nn.Linear(64, 64).eval().requires_grad_(False)


@aot_entry(example_inputs=lambda: (torch.randn(16, 64),))
def score(x: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.silu(PROJ(x))
    return (h.to(torch.bfloat16) * 0.5).float() + h.softmax(dim=-1)
