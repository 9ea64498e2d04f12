"""Loading an ``aoti`` library at run time: a ``dlopen``, no compiler."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def open_library(path: Path, device: str) -> Any:
    """dlopen an AOTInductor library for ``device`` (``cpu``, ``cuda:N``). No compiler, no
    cache writes. A CUDA runner is bound to one device index: ``cuda:1`` inputs need their own."""
    import torch

    if device.startswith("cuda"):
        return torch._C._aoti.AOTIModelContainerRunnerCuda(str(path), 1, device)  # type: ignore[attr-defined]
    return torch._C._aoti.AOTIModelContainerRunnerCpu(str(path), 1)  # type: ignore[attr-defined]
