"""Compile rules: how an exported program becomes the files shipped for one target, and how
the shim turns those files back into something it can call.

A rule declares one of two calling conventions:

* :data:`FLAT`: it compiles the entry's *lifted* program (its flat inputs are the call's
  tensor leaves and then the weights the entry reads from package state, in the program's own
  input structure; its flat outputs are tensors and sizes), in a worker process, and loads a
  callable taking those tensors and returning those outputs. The shim builds the result.
* :data:`CALL`: it compiles the entry's Python function itself from the example inputs, in
  the build process, and loads a callable taking the function's own arguments and returning
  its result. It raises :class:`Refused` for a call it cannot serve (the shim falls back).

Everything around the call (argument specs, dynamic ranges, guards on package state, weights
read by path, fallback and strict mode, file hashes) is the shim's and shared by every rule;
a rule cannot make a call skip a check.

Rules are found by name: the built-ins (:data:`BUILTIN`) and those other distributions
register in the entry point group :data:`ENTRY_POINT_GROUP`::

    [project.entry-points."aot_build.rules"]
    my-rule = "my_pkg.rule:MyRule"        # a class (instantiated with no arguments) or an object

The manifest records the rule's name and version on every artifact; the shim refuses an
artifact whose rule is not installed, or installed at another version, with a warning that
names it (an error in strict mode), and runs the Python function.
"""

from __future__ import annotations

import difflib
import importlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..constants import RULE_AOTI

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from ..targets import Target

#: Entry point group third-party rules register in.
ENTRY_POINT_GROUP = "aot_build.rules"
#: The one calling convention: ``run(tensors)`` takes the call's tensor leaves then the
#: weights, in the manifest's order, and returns the program's flat outputs in order.
FLAT = "flat"
#: ``run(*args, **kwargs)`` takes the function's own arguments and returns its result.
CALL = "call"
#: Rules aot_build ships: name -> "module:attribute".
BUILTIN = {RULE_AOTI: "aot_build.rules.aoti:AotiRule", "dynamo": "aot_build.rules.dynamo:DynamoRule"}


@dataclass
class Built:
    """One compiled file, named by its content, in the request's output folder.

    Args:
        path: the file (its name is what the manifest lists).
        sha256: hash of its bytes.
        size: bytes.
        isa: what the code was compiled for (``AVX2``, ``sm_90``), shown by ``inspect``.
    """

    path: Path
    sha256: str
    size: int
    isa: str


@dataclass(frozen=True)
class CompileRequest:
    """One program to compile for one target.

    Args:
        program: the lifted program, as ``torch.export.load`` returns it.
        target: the device target (``cpu-avx2``, ``cuda-sm90``).
        out_dir: where to write the file; name it by its content (``<sha256[:24]>.<ext>``),
            so that identical outputs are shipped once.
        options: the project's ``inductor-options`` (rules not using Inductor may ignore them).
        strip: the project's ``strip`` setting (libraries: strip symbol tables).
        cxx: the C++ compiler to call, a wrapper that keeps build paths out of the output
            (empty: the rule's own choice).
        function: :data:`CALL` rules: the entry's Python function (a method's function for
            method entries; ``args`` then starts with the instance).
        args: :data:`CALL` rules: the example arguments of this variant (positional).
        dynamic_shapes: :data:`CALL` rules: the variant's ``dynamic_shapes`` (torch.export's
            spelling, by parameter name or position), or None.
        grad: :data:`CALL` rules: compile for calls with grad enabled and gradients (training
            entries); False: for calls under ``torch.no_grad()``.
    """

    program: torch.export.ExportedProgram
    target: Target
    out_dir: Path
    options: dict[str, Any] = field(default_factory=dict)
    strip: bool = True
    cxx: str = ""
    function: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()
    dynamic_shapes: Any = None
    grad: bool = False


@runtime_checkable
class Rule(Protocol):
    """A compile rule. Implementations are plain classes; see :mod:`aot_build.rules.aoti`."""

    #: Name in ``@aot_entry(rule=...)``, ``[tool.aot-build] rule`` and the manifest.
    name: str
    #: Recorded on every artifact; the shim loads an artifact only with the same version, so
    #: bump it whenever files written before can no longer be loaded, or loaded the same way.
    version: str
    #: Calling convention of what :meth:`load` returns: :data:`FLAT` or :data:`CALL`.
    convention: str

    def compile(self, request: CompileRequest) -> Built:
        """Build side: write the file for ``request.target`` into ``request.out_dir``."""
        ...

    def load(self, path: Path, device: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """Run side: the callable for the file at ``path`` (read-only: write nothing next to
        it) serving tensors on ``device`` (``cpu``, ``cuda:0``), for the entry whose Python
        function is ``function``. Called once per file and device; raise to refuse (the shim
        falls back and names the exception)."""
        ...


class Refused(Exception):
    """Raised by a :data:`CALL` rule's callable for a call it cannot serve (its own guards
    failed) before computing anything; the shim runs the Python function, naming the reason."""


class Unloadable(Exception):
    """Raised by :meth:`Rule.load` when loading cannot succeed in this process (a missing
    compiler, a CPU without the artifact's ISA): the shim stops trying for that file. Other
    exceptions may be passing (memory), and the next call tries again."""


class UnknownRule(LookupError):
    """No rule of this name is installed."""


_FOUND: dict[str, Rule] = {}
_LOCK = threading.Lock()


def _installed() -> dict[str, Any]:
    """Entry points of :data:`ENTRY_POINT_GROUP` by name (read from the environment's
    distributions on each call; only asked for names that are not built in)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available() -> list[str]:
    """Names of the built-in and installed rules."""
    return sorted(set(BUILTIN) | set(_installed()))


def _instantiate(obj: Any, name: str, origin: str) -> Rule:
    rule = obj() if isinstance(obj, type) else obj
    missing = [a for a in ("name", "version", "convention", "compile", "load") if not hasattr(rule, a)]
    if missing:
        raise TypeError(
            f"rule {name!r} ({origin}) is not a compile rule: it lacks {', '.join(missing)} "
            "(see aot_build.rules.Rule)"
        )
    if rule.name != name:
        raise TypeError(f"rule {name!r} ({origin}) calls itself {rule.name!r}; register it under that name")
    if rule.convention not in (FLAT, CALL):
        raise TypeError(
            f"rule {name!r} ({origin}) declares calling convention {rule.convention!r}; this "
            f"aot_build calls rules with {FLAT!r} or {CALL!r}"
        )
    return rule


def find(name: str) -> Rule:
    """The rule called ``name``, built in or installed. Raises UnknownRule (naming what is
    available) or TypeError (a registered object that is not a rule)."""
    rule = _FOUND.get(name)
    if rule is not None:
        return rule
    with _LOCK:
        if name in _FOUND:
            return _FOUND[name]
        if name in BUILTIN:
            module, attr = BUILTIN[name].split(":")
            origin = BUILTIN[name]
            obj = getattr(importlib.import_module(module), attr)
        else:
            installed = _installed()
            if name not in installed:
                known = sorted(set(BUILTIN) | set(installed))
                close = difflib.get_close_matches(name, known, n=1)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise UnknownRule(
                    f"no compile rule {name!r} is installed (available: {', '.join(known)}).{hint} "
                    f"Rules from other distributions register in the entry point group "
                    f"{ENTRY_POINT_GROUP!r}; install the one that provides {name!r}"
                )
            origin = f"entry point {installed[name].value}"
            obj = installed[name].load()
        _FOUND[name] = rule = _instantiate(obj, name, origin)
        return rule
