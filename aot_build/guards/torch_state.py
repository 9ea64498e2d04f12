"""torch's global state that a function reads with an argument, as calls with none that the
guard evaluators can make on each call (a ``call`` step takes no argument):
``torch.get_autocast_dtype("cpu")`` is checked as ``get_autocast_dtype_cpu()`` of this module."""

from __future__ import annotations

import functools

import torch

#: ``torch.get_autocast_dtype(device)`` for each device it is answered for while tracing.
get_autocast_dtype_cpu = functools.partial(torch.get_autocast_dtype, "cpu")
get_autocast_dtype_cuda = functools.partial(torch.get_autocast_dtype, "cuda")

#: The device types whose autocast dtype a guard can check (the name of its reader here).
AUTOCAST_DEVICES = ("cpu", "cuda")
