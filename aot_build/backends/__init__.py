"""Compile backends: how an ``@aot_entry`` becomes the files shipped for one target, and how
the shim turns those files back into something it can call.

Writing a backend
-----------------

A backend is a plain class (instantiated with no arguments) or object with:

* ``name``: its name, as entries and the project select it (``@aot_entry(backend="mine")``,
  ``[tool.aot-build] backend = "mine"``) and as the manifest records it on every artifact;
* ``version``: recorded on every artifact; the shim loads an artifact only with the same
  version, so bump it whenever files written before can no longer be loaded the same way;
* ``convention``: :data:`FLAT` or :data:`CALL` (below);
* ``capabilities``: a :class:`Capabilities` (optional: without it, :func:`default_capabilities`
  of its convention);
* ``compile(request) -> Built``: build side; writes one file into ``request.out_dir``, named by
  its content (``<sha256[:24]>.<ext>``, so identical outputs ship once), and describes it;
* ``load(path, device, function) -> callable``: run side; the callable for the file at
  ``path`` (read-only: write nothing next to it) serving tensors on ``device`` (``cpu``,
  ``cuda:0``), for the entry whose Python function is ``function``. Called once per file and
  device; raise :class:`Unloadable` when loading cannot succeed in this process (the shim stops
  trying that file), any other exception for a passing failure (the next call tries again).

The two calling conventions:

* :data:`FLAT`: ``compile`` gets a :class:`ProgramRequest`: the entry's *lifted* program
  (``request.program``, a ``torch.export.ExportedProgram`` whose flat inputs are the call's
  tensor leaves and then the weights the entry reads from package state; its flat outputs are
  tensors and sizes), the ``request.target``, ``request.out_dir``, the build's
  ``request.config`` (:class:`aot_build.build_config.BuildConfig`: ``inductor_options``,
  ``strip``...) and ``request.cxx`` (the C++ compiler to call: a wrapper keeping build paths
  out of the output, "" for the backend's own choice). ``load`` returns
  ``run(tensors) -> outputs``: the flat tensors in the manifest's order, the program's flat
  outputs in order; the shim builds the result. A training entry (``backward=True``) of a
  backend with ``training="joint"`` is compiled as three programs: inference, ``forward`` and
  ``backward`` (:class:`aot_build.manifest.TrainingRecord` says how they connect).
* :data:`CALL`: ``compile`` gets a :class:`FunctionRequest`: the entry's Python
  ``request.function`` with one variant's example ``request.args`` and
  ``request.dynamic_shapes``, ``request.grad`` (True: compile for calls with grad enabled, the
  artifact of role ``grad``; False: under ``torch.no_grad()``), ``request.target``,
  ``request.out_dir`` and ``request.config``. It runs in the build process. ``load`` returns a
  callable taking the function's own arguments and returning its result; it raises
  :class:`Refused` for a call it cannot serve (before computing anything: the shim runs the
  Python function).

Everything around the call (argument specs, dynamic ranges, guards on package state, weights
read by path, fallback and strict mode, file hashes) is the shim's and shared by every
backend; a backend cannot make a call skip a check. Every entry is traced with torch.export
whatever its backend: the guard record comes from that trace.

Registering
-----------

Backends are found by name (:func:`find`): the built-ins (:data:`BUILTIN`) and those other
distributions register in the entry point group :data:`ENTRY_POINT_GROUP`::

    [project.entry-points."aot_build.backends"]
    mine = "my_pkg.backend:MyBackend"     # a class (instantiated with no arguments) or an object

(The group's name before aot-build 0.4.0, :data:`OLD_ENTRY_POINT_GROUP`, is still read, with a
DeprecationWarning naming the distribution.)

The shim refuses an artifact whose backend is not installed, or installed at another version,
with a warning that names it (an error in strict mode), and runs the Python function.
"""

from __future__ import annotations

import difflib
import importlib
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..constants import BACKEND_AOTI
from ..records import record

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

    from ..build_config import BuildConfig
    from ..targets import Target

#: Entry point group third-party backends register in.
ENTRY_POINT_GROUP = "aot_build.backends"
#: Its name before aot-build 0.4.0: still read, with a DeprecationWarning naming the distribution.
OLD_ENTRY_POINT_GROUP = "aot_build.rules"
#: The one calling convention: ``run(tensors)`` takes the call's tensor leaves then the
#: weights, in the manifest's order, and returns the program's flat outputs in order.
FLAT = "flat"
#: ``run(*args, **kwargs)`` takes the function's own arguments and returns its result.
CALL = "call"
#: Backends aot_build ships: name -> "module:attribute".
BUILTIN = {
    BACKEND_AOTI: "aot_build.backends.aoti:AotiBackend",
    "dynamo": "aot_build.backends.dynamo:DynamoBackend",
}

#: Training styles (:attr:`Capabilities.training`): a FLAT backend compiles the joint split's
#: ``forward`` and ``backward`` programs; a CALL backend compiles the function for grad mode
#: (role ``grad``); or the backend builds no training entries (``backward=True`` is refused).
TRAINING_JOINT = "joint"
TRAINING_GRAD = "grad"
TRAINING_NONE = "none"


@record(frozen=True)
class Capabilities:
    """What a backend needs and offers; the build, its cache, the Bazel steps and packaging
    act on these, never on a backend's name.

    Args:
        devices: device types it builds targets for (``cpu``, ``cuda``); an entry built for
            another target's device is refused at export.
        needs_compiler: it calls a C++ compiler at build time (the build checks for one
            before exporting).
        in_process: it compiles in the build process, not in a worker from a saved program
            (always so for :data:`CALL` backends); such outputs are not kept in the build
            cache and cannot be built as separate Bazel actions.
        cacheable: its output is determined by the request (the saved program, target and
            configuration), so the build cache may keep it.
        native: its files are native code for the build's platform (shared libraries): the
            wheel is tagged with the manylinux policy they meet, and they are held to the
            build's manylinux floor. False: the wheel gets the architecture's oldest tag.
        training: how it builds training entries: :data:`TRAINING_JOINT` (FLAT),
            :data:`TRAINING_GRAD` (CALL) or :data:`TRAINING_NONE`.
    """

    devices: frozenset[str] = frozenset({"cpu", "cuda"})
    needs_compiler: bool = True
    in_process: bool = False
    cacheable: bool = True
    native: bool = False
    training: str = TRAINING_JOINT


def default_capabilities(convention: str) -> Capabilities:
    """What a backend that declares no ``capabilities`` is taken to need and offer: a
    compiler, no native files, and the convention's way of building and training."""
    if convention == CALL:
        return Capabilities(in_process=True, cacheable=False, training=TRAINING_GRAD)
    return Capabilities()


def capabilities(backend: Backend) -> Capabilities:
    """``backend``'s declared capabilities, else its convention's defaults."""
    declared = getattr(backend, "capabilities", None)
    return declared if isinstance(declared, Capabilities) else default_capabilities(backend.convention)


@record
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


@record(frozen=True)
class ProgramRequest:
    """A :data:`FLAT` backend's request: one lifted program to compile for one target.

    Args:
        program: the lifted program, as ``torch.export.load`` returns it.
        target: the device target (``cpu-avx2``, ``cuda-sm90``).
        out_dir: where to write the file; name it by its content (``<sha256[:24]>.<ext>``),
            so that identical outputs are shipped once.
        config: the build's configuration; ``config.inductor_options`` (the project's
            ``inductor-options``; backends not using Inductor may ignore them) and
            ``config.strip`` (libraries: strip symbol tables) shape the file.
        cxx: the C++ compiler to call, a wrapper that keeps build paths out of the output
            (empty: the backend's own choice).
        batch: how many programs for ``target`` the build compiles, this one included (its
            worker processes share set-up work): a hint, for set-up work that pays off only
            when shared (the aoti backend's precompiled headers); it must not change the file.
    """

    program: torch.export.ExportedProgram
    target: Target
    out_dir: Path
    config: BuildConfig
    cxx: str = ""
    batch: int = 1


@record(frozen=True)
class FunctionRequest:
    """A :data:`CALL` backend's request: the entry's Python function to compile for one target,
    in the build process, from one variant's example arguments.

    Args:
        function: the entry's Python function (a method's function for method entries;
            ``args`` then starts with the instance).
        args: the example arguments of this variant (positional).
        dynamic_shapes: the variant's ``dynamic_shapes`` (torch.export's spelling, by
            parameter name or position), or None.
        grad: compile for calls with grad enabled and gradients (training entries); False:
            for calls under ``torch.no_grad()``.
        target: the device target (``cpu-avx2``).
        out_dir: where to write the file; name it by its content, as :class:`ProgramRequest`.
        config: the build's configuration (``config.inductor_options``, ``config.strip``).
    """

    function: Callable[..., Any]
    args: tuple[Any, ...]
    dynamic_shapes: Any
    grad: bool
    target: Target
    out_dir: Path
    config: BuildConfig


@runtime_checkable
class Backend(Protocol):
    """A compile backend (see the module docstring); e.g. :mod:`aot_build.backends.aoti`."""

    #: Name in ``@aot_entry(backend=...)``, ``[tool.aot-build] backend`` and the manifest.
    name: str
    #: Recorded on every artifact; the shim loads an artifact only with the same version, so
    #: bump it whenever files written before can no longer be loaded, or loaded the same way.
    version: str
    #: Calling convention of what :meth:`load` returns: :data:`FLAT` or :data:`CALL`.
    convention: str

    def compile(self, request: Any) -> Built:
        """Build side: write the file for ``request.target`` into ``request.out_dir``;
        ``request``: a :class:`ProgramRequest` (:data:`FLAT`) or :class:`FunctionRequest`
        (:data:`CALL`). May also declare ``capabilities`` (:class:`Capabilities`)."""
        ...

    def load(self, path: Path, device: str, function: Callable[..., Any]) -> Callable[..., Any]:
        """Run side: the callable for the file at ``path`` (read-only: write nothing next to
        it) serving tensors on ``device`` (``cpu``, ``cuda:0``), for the entry whose Python
        function is ``function``. Called once per file and device; raise to refuse (the shim
        falls back and names the exception)."""
        ...


class Refused(Exception):
    """Raised by a :data:`CALL` backend's callable for a call it cannot serve (its own guards
    failed) before computing anything; the shim runs the Python function, naming the reason."""


class Unloadable(Exception):
    """Raised by :meth:`Backend.load` when loading cannot succeed in this process (a missing
    compiler, a CPU without the artifact's ISA): the shim stops trying for that file. Other
    exceptions may be passing (memory), and the next call tries again."""


class UnknownBackend(LookupError):
    """No backend of this name is installed."""


_FOUND: dict[str, Backend] = {}
_LOCK = threading.Lock()


def _installed() -> dict[str, Any]:
    """Entry points of :data:`ENTRY_POINT_GROUP` by name, then those only in
    :data:`OLD_ENTRY_POINT_GROUP` (read from the environment's distributions on each call; only
    asked for names that are not built in)."""
    from importlib.metadata import entry_points

    found = entry_points()  # one pass over the distributions for both groups
    old = {ep.name: ep for ep in found.select(group=OLD_ENTRY_POINT_GROUP)}
    return {**old, **{ep.name: ep for ep in found.select(group=ENTRY_POINT_GROUP)}}


def _load(ep: Any) -> Any:
    """The object entry point ``ep`` names; one in :data:`OLD_ENTRY_POINT_GROUP` warns."""
    if ep.group == OLD_ENTRY_POINT_GROUP:
        dist = ep.dist.name if getattr(ep, "dist", None) is not None else "an installed distribution"
        warnings.warn(
            f"{dist} registers the compile backend {ep.name!r} in the entry point group "
            f"{OLD_ENTRY_POINT_GROUP!r}, which is deprecated: register it in {ENTRY_POINT_GROUP!r} "
            f'([project.entry-points."{ENTRY_POINT_GROUP}"] in its pyproject.toml)',
            DeprecationWarning,
            stacklevel=3,
        )
    return ep.load()


def available() -> list[str]:
    """Names of the built-in and installed backends."""
    return sorted(set(BUILTIN) | set(_installed()))


def _instantiate(obj: Any, name: str, origin: str) -> Backend:
    backend = obj() if isinstance(obj, type) else obj
    missing = [a for a in ("name", "version", "convention", "compile", "load") if not hasattr(backend, a)]
    if missing:
        raise TypeError(
            f"backend {name!r} ({origin}) is not a compile backend: it lacks {', '.join(missing)} "
            "(see aot_build.backends.Backend)"
        )
    if backend.name != name:
        raise TypeError(
            f"backend {name!r} ({origin}) calls itself {backend.name!r}; register it under that name"
        )
    if backend.convention not in (FLAT, CALL):
        raise TypeError(
            f"backend {name!r} ({origin}) declares calling convention {backend.convention!r}; this "
            f"aot_build calls backends with {FLAT!r} or {CALL!r}"
        )
    declared = getattr(backend, "capabilities", None)
    if declared is not None and not isinstance(declared, Capabilities):
        raise TypeError(
            f"backend {name!r} ({origin}) declares capabilities of type {type(declared).__name__}; "
            "declare an aot_build.backends.Capabilities"
        )
    caps = capabilities(backend)
    wanted = TRAINING_GRAD if backend.convention == CALL else TRAINING_JOINT
    if caps.training not in (wanted, TRAINING_NONE):
        raise TypeError(
            f"backend {name!r} ({origin}) declares training {caps.training!r}; a {backend.convention!r} "
            f"backend trains {wanted!r} or {TRAINING_NONE!r}"
        )
    if backend.convention == CALL and not caps.in_process:
        raise TypeError(
            f"backend {name!r} ({origin}) declares in_process=False; a {CALL!r} backend compiles "
            "the Python function, which only the build process holds: declare in_process=True"
        )
    return backend


def find(name: str) -> Backend:
    """The backend called ``name``, built in or installed. Raises UnknownBackend (naming what
    is available) or TypeError (a registered object that is not a backend)."""
    backend = _FOUND.get(name)
    if backend is not None:
        return backend
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
                raise UnknownBackend(
                    f"no compile backend {name!r} is installed (available: {', '.join(known)}).{hint} "
                    f"Backends from other distributions register in the entry point group "
                    f"{ENTRY_POINT_GROUP!r}; install the one that provides {name!r}"
                )
            origin = f"entry point {installed[name].value}"
            obj = _load(installed[name])
        _FOUND[name] = backend = _instantiate(obj, name, origin)
        return backend
