"""Weights: tensors an entry reads from outside its arguments, passed to the artifact as inputs.

AOTInductor bakes every tensor a traced function reads into the library as a constant. A
shipped artifact that computed with build-time weights after the user loads a checkpoint
would be a silent wrong answer, so every tensor the trace reads from a module global, an
``nn.Module`` (parameters, buffers, plain tensor attributes), a config or pipeline object, a
closure cell, or the instance of a method entry (every tensor Dynamo's guards name, see
:mod:`aot_build.guards.capture`) becomes an input of the artifact, read by the same path.
A tensor read through several paths (tied weights, a re-exported global) is one input, and
the shim checks that every path still leads to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..guards.paths import ObjPath, assign


@dataclass
class Lifted:
    """The weights of one variant, in the order the artifact takes them after its inputs."""

    paths: list[list[ObjPath]] = field(default_factory=list)
    tensors: list[torch.Tensor] = field(default_factory=list)

    def index(self, tensor: torch.Tensor) -> int | None:
        for i, known in enumerate(self.tensors):
            if known is tensor:
                return i
        return None

    def add(self, path: ObjPath, tensor: torch.Tensor) -> int:
        """Lift ``tensor`` read at ``path`` (another path of a lifted tensor is an alias)."""
        i = self.index(tensor)
        if i is None:
            self.tensors.append(tensor)
            self.paths.append([path])
            return len(self.tensors) - 1
        if path not in self.paths[i]:
            self.paths[i].append(path)
        return i

    @contextlib.contextmanager
    def bound(
        self, substitutes: tuple[torch.Tensor, ...], self_obj: Any = None, fn: Any = None
    ) -> Iterator[None]:
        """While tracing: every path of weight ``i`` holds ``substitutes[i]`` (``fn``: the entry
        function, whose closure cells are closure roots)."""
        undo = []
        try:
            for paths, sub in zip(self.paths, substitutes, strict=True):
                for path in paths:
                    # a path that ends in a call (an LSTM's weak references to its weights)
                    # cannot be assigned: the weight is also at an attribute path (capture)
                    if not (path.steps and path.steps[-1][0] == "call"):
                        undo.append(assign(path, sub, self_obj, fn))
            yield
        finally:
            for restore in reversed(undo):
                restore()


def constant_tensors(ep: torch.export.ExportedProgram) -> dict[str, torch.Tensor]:
    """Tensors the exported graph would bake in (neither arguments nor lifted weights)."""
    consts = {k: v for k, v in ep.constants.items() if isinstance(v, torch.Tensor)}
    consts.update({k: v for k, v in ep.state_dict.items() if isinstance(v, torch.Tensor)})
    return consts
