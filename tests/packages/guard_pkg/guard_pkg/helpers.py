import torch

SCALE = torch.linspace(0.5, 1.5, 4)
FACTOR = 2.0
