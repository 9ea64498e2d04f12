"""Find the tensors an entry reads from module globals and turn them into inputs.

AOTInductor bakes every tensor a traced function reads into the library as a constant. A
shipped artifact that computed with build-time weights after the user loads a checkpoint
would be a silent wrong answer, so every tensor reachable from a module global of the
entry's package (directly, through an ``nn.Module`` global, or through helper functions and
submodules of the package) is passed to the artifact as an extra input on every call.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.nn.utils.stateless import _reparametrize_module

from ..manifest import ModuleState, WeightBinding
from .specs import tensor_spec


@dataclass
class Lifted:
    """The weights of one entry, in the order the artifact takes them after its arguments."""

    bindings: list[WeightBinding] = field(default_factory=list)
    tensors: list[torch.Tensor] = field(default_factory=list)
    modules: list[ModuleState] = field(default_factory=list)
    # (module dict, global name) of plain tensor globals → weight index
    _plain: list[tuple[dict[str, Any], str, int]] = field(default_factory=list)
    # nn.Module global → {parameter/buffer path: weight index}
    _nn: list[tuple[torch.nn.Module, dict[str, int]]] = field(default_factory=list)
    _seen_globals: set[tuple[str, str]] = field(default_factory=set)

    def _index(self, t: torch.Tensor, binding: WeightBinding) -> int:
        for i, known in enumerate(self.tensors):
            if known is t:
                return i
        self.tensors.append(t)
        self.bindings.append(binding)
        return len(self.tensors) - 1

    def add_global(self, module: types.ModuleType, name: str) -> None:
        """Lift the tensor or ``nn.Module`` held by ``module.name``."""
        if (module.__name__, name) in self._seen_globals:
            return
        self._seen_globals.add((module.__name__, name))
        value = module.__dict__[name]
        if isinstance(value, torch.Tensor):
            i = self._index(value, WeightBinding(module.__name__, name, "", tensor_spec(value)))
            self._plain.append((module.__dict__, name, i))
        elif isinstance(value, torch.nn.Module):
            paths: dict[str, int] = {}
            named = [
                *value.named_parameters(remove_duplicate=False),
                *value.named_buffers(remove_duplicate=False),
            ]
            for path, t in named:
                if t is None:
                    continue
                paths[path] = self._index(t, WeightBinding(module.__name__, name, path, tensor_spec(t)))
            self._nn.append((value, paths))
            self.modules.append(ModuleState(module.__name__, name, bool(value.training)))

    @contextlib.contextmanager
    def bound(self, weights: tuple[torch.Tensor, ...]) -> Iterator[None]:
        """While tracing: make every lifted global read ``weights[i]`` instead."""
        saved = [(d, n, d[n]) for d, n, _ in self._plain]
        with contextlib.ExitStack() as stack:
            for mod, paths in self._nn:
                stack.enter_context(_reparametrize_module(mod, {p: weights[i] for p, i in paths.items()}))
            try:
                for d, n, i in self._plain:
                    d[n] = weights[i]
                yield
            finally:
                for d, n, v in saved:
                    d[n] = v


def _in_package(obj: Any, package: str) -> bool:
    name = str(getattr(obj, "__module__", None) or getattr(obj, "__name__", "") or "")
    return bool(name) and (name == package or name.startswith(package + "."))


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def lift_referenced(fn: types.FunctionType, package: str, lifted: Lifted) -> None:
    """Lift the tensor globals ``fn`` names, following helper functions and submodules of
    ``package`` (the entry's top-level package) transitively."""
    seen: set[int] = set()

    def visit(func: types.FunctionType) -> None:
        if id(func) in seen:
            return
        seen.add(id(func))
        module = sys.modules.get(func.__module__)
        if module is None or module.__dict__ is not func.__globals__:
            return
        for name in _code_names(func.__code__):
            value = func.__globals__.get(name)
            if isinstance(value, (torch.Tensor, torch.nn.Module)):
                lifted.add_global(module, name)
            elif isinstance(value, types.FunctionType) and _in_package(value, package):
                visit(value)
            elif hasattr(value, "__wrapped__") and _in_package(value, package):
                inner = getattr(value, "__wrapped__", None)
                if isinstance(inner, types.FunctionType):
                    visit(inner)
            elif isinstance(value, types.ModuleType) and _in_package(value, package):
                visit_module_attrs(value, func.__code__)

    def visit_module_attrs(mod: types.ModuleType, code: types.CodeType) -> None:
        for attr in _code_names(code):
            value = mod.__dict__.get(attr)
            if isinstance(value, (torch.Tensor, torch.nn.Module)):
                lifted.add_global(mod, attr)
            elif isinstance(value, types.FunctionType) and _in_package(value, package):
                visit(value)

    visit(fn)


def package_tensor_index(
    package: str,
) -> dict[tuple[int, tuple[int, ...], torch.dtype], tuple[types.ModuleType, str]]:
    """Every tensor held by a global of ``package``'s imported modules (directly or inside an
    ``nn.Module``), keyed by storage address, shape and dtype, with the global that holds it.

    Used after export to recognise constants that static analysis missed.
    """
    index: dict[tuple[int, tuple[int, ...], torch.dtype], tuple[types.ModuleType, str]] = {}
    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not (mod_name == package or mod_name.startswith(package + ".")):
            continue
        for name, value in list(vars(mod).items()):
            tensors: list[torch.Tensor] = []
            if isinstance(value, torch.Tensor):
                tensors = [value]
            elif isinstance(value, torch.nn.Module):
                tensors = [*value.parameters(), *value.buffers()]
            for t in tensors:
                index.setdefault((t.data_ptr(), tuple(t.shape), t.dtype), (mod, name))
    return index
