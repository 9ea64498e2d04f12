import torch

from aot_build import aot_entry

double = aot_entry(lambda x: x * 2, example_inputs=(torch.zeros(2),))
