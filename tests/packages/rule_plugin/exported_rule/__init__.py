"""A compile backend from another distribution, registered in the ``aot_build.backends`` entry
point group: it ships the lifted program as ``torch.export.save`` wrote it and runs it with
``torch.export.load(...).module()`` (no Inductor, no compiler, at build or run time)."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils import _pytree as pytree

from aot_build.rules import FLAT, Built, CompileRequest

#: Files this process loaded (the test asserts the backend, not the fallback, served calls).
LOADED: list[str] = []


class ExportedRule:
    name = "exported"
    version = "1"
    convention = FLAT

    def compile(self, request: CompileRequest) -> Built:
        buf = io.BytesIO()
        torch.export.save(request.program, buf)
        data = buf.getvalue()
        digest = hashlib.sha256(data).hexdigest()
        path = request.out_dir / f"{digest[:24]}.pt2"
        path.write_bytes(data)
        return Built(path, digest, len(data), "eager")

    def load(
        self, path: Path, device: str, function: Callable[..., Any]
    ) -> Callable[[Sequence[torch.Tensor]], Sequence[Any]]:
        program = torch.export.load(path)
        module, spec = program.module(), program.call_spec.in_spec
        LOADED.append(path.name)

        def run(tensors: Sequence[torch.Tensor]) -> Sequence[Any]:
            # the flat tensors in the program's own input structure (arguments, weights)
            args, kwargs = pytree.tree_unflatten(list(tensors), spec)
            with torch.no_grad():
                return pytree.tree_leaves(module(*args, **kwargs))

        return run
