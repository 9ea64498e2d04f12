import torch

from aot_build import aot_entry

relu = aot_entry(torch.relu, example_inputs=(torch.zeros(2),))
