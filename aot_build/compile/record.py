"""Record what an entry's trace reads from package state, and by which path.

The compiled code depends on more than its tensor arguments: on every weight it reads, and
on every non-tensor value its Python code specialised on (a global ``TEMP = 2.0``, an
attribute ``self.act = "tanh"``, a module's class, its ``training`` flag, its hooks, a
config object's flags). AOTInductor bakes all of it in. The shim must re-check each on every
call, so the build has to know exactly what was read, and through which path.

While the entry runs (eagerly, then under torch.export), this module watches it:

* package modules' globals the running package code names (``LOAD_GLOBAL``, found from the
  bytecode of every package function that runs, through ``sys.setprofile``);
* attribute reads on package module objects (``helpers.SCALE``), by swapping their class
  for a recording subclass of ``ModuleType`` for the duration of the call;
* attribute reads on every object reachable from the package's globals (``nn.Module`` trees,
  config objects, pipelines), by wrapping ``__getattribute__`` of their classes (and
  ``nn.Module.__getattr__``, which serves parameters, buffers and submodules).

A read on an object whose path is known extends the path (``MODEL.encoder`` read ``layer``
gives ``MODEL.encoder.layer``); the value read is remembered under that path. Objects read
through two different paths are recorded as aliases. Nothing is recorded outside the call,
and every patch is undone when it returns.
"""

from __future__ import annotations

import contextlib
import dis
import functools
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..manifest import ObjPath
from ..names import in_package
from ..values import is_plain

#: Sentinel value of a read that found nothing (``hasattr`` false, ``getattr`` default).
ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "<absent>"})()
#: A read of a method found on the class: guarded by the instance not overriding it.
METHOD: Any = type("Method", (), {"__repr__": lambda self: "<method>"})()

_MAX_WALK = 200_000
_LOAD_GLOBAL = {"LOAD_GLOBAL", "LOAD_NAME"}


def _dict_of(obj: Any) -> dict[str, Any] | None:
    try:
        d = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return None
    return d if isinstance(d, dict) else None


def _global_names(code: types.CodeType) -> tuple[str, ...]:
    """Names a code object reads as globals (not attribute names, which share co_names)."""
    return tuple(sorted({str(i.argval) for i in dis.get_instructions(code) if i.opname in _LOAD_GLOBAL}))


def _is_trackable(value: Any) -> bool:
    """Objects whose identity and attributes matter (not plain values, callables, types)."""
    if value is None or value is ABSENT or value is METHOD or is_plain(value):
        return False
    return not isinstance(
        value, (types.FunctionType, types.BuiltinFunctionType, types.MethodType, type, types.ModuleType)
    )


@dataclass
class Recording:
    """What one run of the entry read.

    Args:
        reads: every path read, with the value found (``ABSENT`` / ``METHOD`` markers).
        aliases: for each object reached through several paths: those paths.
        pathless: descriptions of reads on package objects reached by an unknown route.
    """

    reads: dict[ObjPath, Any] = field(default_factory=dict)
    aliases: dict[int, list[ObjPath]] = field(default_factory=dict)
    pathless: list[str] = field(default_factory=list)


class Recorder:
    """Watches reads of package state while an entry runs; see the module docstring.

    Args:
        package: the entry's top-level package.
        roots: extra objects with fixed paths (``self`` of a method entry).
    """

    def __init__(self, package: str, roots: list[tuple[ObjPath, Any]]) -> None:
        self.package = package
        self.roots = roots
        self._active = False
        self._paths: dict[int, ObjPath] = {}
        self._keep: dict[int, Any] = {}
        self._seen_codes: set[types.CodeType] = set()
        self.recording = Recording()
        self.known = self._walk()

    # ------------------------------------------------------------------ what can be watched

    def package_modules(self) -> list[types.ModuleType]:
        return [
            m
            for name, m in list(sys.modules.items())
            if isinstance(m, types.ModuleType) and in_package(name, self.package)
        ]

    def _walk(self) -> dict[int, Any]:
        """Every object reachable from the package's globals and the roots (bounded)."""
        seen: dict[int, Any] = {}
        stack: list[Any] = [v for m in self.package_modules() for v in list(vars(m).values())]
        stack += [obj for _, obj in self.roots]
        while stack and len(seen) < _MAX_WALK:
            obj = stack.pop()
            if id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
                continue
            if isinstance(obj, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)):
                continue
            seen[id(obj)] = obj
            if isinstance(obj, torch.Tensor):
                continue
            if isinstance(obj, dict):
                stack.extend(obj.values())
            elif isinstance(obj, (list, tuple, set, frozenset)):
                stack.extend(obj)
            else:
                d = _dict_of(obj)
                if d is not None:
                    stack.extend(d.values())
        return seen

    def _classes(self) -> list[type]:
        classes: dict[int, type] = {}
        for obj in self.known.values():
            cls = type(obj)
            if cls.__module__ == "builtins" or issubclass(cls, (torch.Tensor, types.ModuleType)):
                continue
            if issubclass(cls, torch.nn.Module) and "__getattribute__" not in vars(cls):
                continue  # covered by nn.Module's own patch
            classes[id(cls)] = cls
        return list(classes.values())

    # ------------------------------------------------------------------ paths

    def _path_of(self, obj: Any) -> ObjPath | None:
        return self._paths.get(id(obj))

    def _reach(self, path: ObjPath, value: Any) -> None:
        """``value`` was found at ``path``: remember the path (or the alias)."""
        self.recording.reads.setdefault(path, value)
        if not _is_trackable(value):
            return
        known = self._paths.get(id(value))
        if known is None:
            self._paths[id(value)] = path
            self._keep[id(value)] = value
            if isinstance(value, (dict, list, tuple)):
                items = value.items() if isinstance(value, dict) else enumerate(value)
                for key, item in list(items):
                    if isinstance(key, (str, int)) and _is_trackable(item) and id(item) not in self._paths:
                        # iterating a container reads every item: each is guarded (its class)
                        self._paths[id(item)] = path.child("item", key)
                        self._keep[id(item)] = item
                        self.recording.reads.setdefault(path.child("item", key), item)
        elif known != path:
            paths = self.recording.aliases.setdefault(id(value), [known])
            if path not in paths:
                paths.append(path)

    def on_read(self, obj: Any, name: str, kind: str, value: Any) -> None:
        if not self._active or (name.startswith("__") and name.endswith("__")):
            return
        self._active = False  # our own attribute reads below must not be recorded
        try:
            base = self._path_of(obj)
            if base is None:
                if id(obj) in self.known and not isinstance(obj, (dict, list, tuple)):
                    self.recording.pathless.append(f"{type(obj).__qualname__}.{name}")
                return
            if kind == "getattr" and isinstance(value, types.MethodType) and value.__self__ is obj:
                value = METHOD
            elif kind == "getattr" and value is not ABSENT:
                d = _dict_of(obj)
                if d is not None and name in d and d[name] is value:
                    kind = "attr"
            self._reach(base.child(kind, name), value)
        finally:
            self._active = True

    def on_global(self, module: str, name: str, value: Any) -> None:
        if not self._active or (name.startswith("__") and name.endswith("__")):
            return
        self._active = False
        try:
            self._reach(ObjPath(("global", module, name)), value)
        finally:
            self._active = True

    # ------------------------------------------------------------------ watching

    def _profile(self, frame: types.FrameType, event: str, arg: Any) -> None:
        if event != "call" or not self._active:
            return
        code = frame.f_code
        if code in self._seen_codes:
            return
        self._seen_codes.add(code)
        module = frame.f_globals.get("__name__")
        if not isinstance(module, str) or not in_package(module, self.package):
            return
        mod = sys.modules.get(module)
        if mod is None or mod.__dict__ is not frame.f_globals:
            return
        g = frame.f_globals
        for name in _global_names(code):
            if name in g:
                self.on_global(module, name, g[name])

    @contextlib.contextmanager
    def watching(self) -> Iterator[Recording]:
        """Record reads while the body runs; every patch is undone afterwards."""
        self.recording = Recording()
        self._paths = {}
        self._keep = {}
        self._seen_codes = set()
        for path, obj in self.roots:
            self._reach(path, obj)
        undo: list[Callable[[], None]] = []
        try:
            self._patch_classes(undo)
            self._patch_modules(undo)
            previous = sys.getprofile()
            sys.setprofile(self._profile)
            undo.append(lambda: sys.setprofile(previous))
            self._active = True
            yield self.recording
        finally:
            self._active = False
            for fn in reversed(undo):
                fn()

    def _patch_classes(self, undo: list[Callable[[], None]]) -> None:
        rec = self
        targets = [torch.nn.Module, *self._classes()]
        originals = {cls: cls.__getattribute__ for cls in targets}
        for cls, original in originals.items():
            own = vars(cls).get("__getattribute__")
            is_module = issubclass(cls, torch.nn.Module)

            def getattribute(self: Any, name: str, _orig: Any = original, _mod: bool = is_module) -> Any:
                try:
                    value = _orig(self, name)
                except AttributeError:
                    if not _mod:  # nn.Module falls back to __getattr__, recorded there
                        rec.on_read(self, name, "getattr", ABSENT)
                    raise
                rec.on_read(self, name, "getattr", value)
                return value

            try:
                cls.__getattribute__ = getattribute  # type: ignore[method-assign, assignment]
            except TypeError:  # an extension type: its attributes are not Python state
                continue
            undo.append(_restorer(cls, "__getattribute__", own))

        original_getattr = torch.nn.Module.__getattr__

        def module_getattr(self: torch.nn.Module, name: str) -> Any:
            try:
                value = original_getattr(self, name)
            except AttributeError:
                rec.on_read(self, name, "getattr", ABSENT)
                raise
            d = object.__getattribute__(self, "__dict__")
            kind = "getattr"
            for table, table_kind in (
                ("_parameters", "param"),
                ("_buffers", "buffer"),
                ("_modules", "child"),
            ):
                if name in d.get(table, ()):
                    kind = table_kind
                    break
            rec.on_read(self, name, kind, value)
            return value

        torch.nn.Module.__getattr__ = module_getattr  # type: ignore[method-assign]
        undo.append(_restorer(torch.nn.Module, "__getattr__", original_getattr))

    def _patch_modules(self, undo: list[Callable[[], None]]) -> None:
        rec = self

        class RecordingModule(types.ModuleType):
            def __getattribute__(self, name: str) -> Any:
                value = super().__getattribute__(name)
                d = object.__getattribute__(self, "__dict__")
                if name in d and d[name] is value:
                    rec.on_global(object.__getattribute__(self, "__name__"), name, value)
                return value

        for mod in self.package_modules():
            if type(mod) is types.ModuleType:
                mod.__class__ = RecordingModule
                undo.append(functools.partial(setattr, mod, "__class__", types.ModuleType))


def _restorer(cls: type, name: str, own: Any) -> Callable[[], None]:
    def restore() -> None:
        if own is None:
            delattr(cls, name)
        else:
            setattr(cls, name, own)

    return restore
