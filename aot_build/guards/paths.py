"""Where a value lives: a root the shim can reach on every call, and the steps below it.

A path is what a guard checks and what a weight is read through. Roots and steps mirror the
sources of torch.compile's guards (``G['CONFIG'].scale``, ``type(L['self']).K``,
``fn.__closure__[0].cell_contents``), so every read Dynamo records has a path here.

This module is the one place that says what each root and step means: :func:`resolve` follows a
path in Python (building, and explaining a failed check), :func:`assign` puts another object
at a path while the build traces (weights), and the run-time evaluators (``bound.py``,
``_evaluator.c``) implement the same table.
"""

from __future__ import annotations

import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from .. import values
from ..names import import_ref
from ..records import TupleRecord

#: Roots: ``(kind, *args)``.
ROOTS = {
    "global": "a module global, ``sys.modules[module].__dict__[name]`` (args: module, name)",
    "ref": "a module, class or function found once by importing ``module:qualname``",
    "self": "the instance a method entry is called on",
    "closure": "a free variable of the entry function: its closure cell's contents (arg: name)",
}

#: Steps below a root: ``(kind, key)``; ``key`` is None where the kind takes none.
STEPS = {
    "getattr": "``getattr(obj, key)``",
    "dict": "``obj.__dict__`` (of a class: its namespace)",
    "item": "a dict's item ``key``, read from the dict's own storage (no ``__getitem__`` override)",
    "index": "``obj[key]``: sequences and other containers",
    "key": "the dict's ``key``-th key (``list(obj.keys())[key]``)",
    "type": "``type(obj)``",
    "mro": "``obj.__mro__``",
    "closure": "``obj.__closure__``",
    "code": "``obj.__code__``",
    "defaults": "``obj.__defaults__``",
    "kwdefaults": "``obj.__kwdefaults__``",
    "call": "``obj()``: a weak reference's target; ``obj(*key)`` for a tuple ``key`` (a cached answer)",
}

#: Steps whose key is a Python value (stored encoded by :mod:`aot_build.values`).
VALUE_KEYS = frozenset({"item", "index", "call"})
#: Steps whose key is an attribute name.
NAME_KEYS = frozenset({"getattr"})
#: Steps whose key is a position.
INT_KEYS = frozenset({"key"})
#: Steps that take no key.
NO_KEY = frozenset(STEPS) - VALUE_KEYS - NAME_KEYS - INT_KEYS

#: nn.Module tables shown as plain attributes in labels (``net.0.weight``).
_MODULE_TABLES = ("_modules", "_parameters", "_buffers")


class PathError(LookupError):
    """The path does not lead anywhere now; the message says which step failed."""


def dict_keys(obj: Any) -> list[Any]:
    """A mapping's keys in the order iterating it gives them: a subclass's own (an
    OrderedDict after ``move_to_end``), as the C evaluator reads them; a plain dict's without
    calling anything. A set's elements, in the order it iterates them in this process."""
    if isinstance(obj, (set, frozenset)):
        return list(obj)
    return list(dict.keys(obj) if type(obj) is dict else obj.keys())


class ObjPath(TupleRecord):
    """A root (:data:`ROOTS`) and steps (:data:`STEPS`) below it.

    Args:
        root: ``("global", module, name)``, ``("ref", "module:qualname")``, ``("self",)``
            or ``("closure", name)``.
        steps: ``(kind, key)`` pairs.
    """

    root: tuple[str, ...]
    steps: tuple[tuple[str, Any], ...] = ()

    def child(self, kind: str, key: Any = None) -> ObjPath:
        return ObjPath(self.root, (*self.steps, (kind, key)))

    def parent(self) -> ObjPath:
        return ObjPath(self.root, self.steps[:-1])

    def label(self) -> str:
        """``pkg.mod.MODEL.encoder.layer.0.weight``, ``self.qkv.weight``, ``type(self).K``."""
        kind = self.root[0]
        if kind == "global":
            text = f"{self.root[1]}.{self.root[2]}"
        elif kind == "ref":
            text = self.root[1].rstrip(":").replace(":", ".")
        elif kind == "closure":
            text = f"{self.root[1]} (a closure variable)"
        else:
            text = "self"
        steps = self.steps
        i = 0
        while i < len(steps):
            step, key = steps[i]
            nxt = steps[i + 1] if i + 1 < len(steps) else None
            if (
                step == "getattr"
                and key in _MODULE_TABLES
                and nxt is not None
                and nxt[0] == "item"
                and isinstance(nxt[1], str)
            ) or (
                (step == "dict" or (step == "getattr" and key == "__dict__"))
                and nxt is not None
                and nxt[0] == "item"
                and isinstance(nxt[1], str)
            ):
                text += f".{nxt[1]}"
                i += 2
                continue
            if step == "getattr":
                text += f".{key}"
            elif step in ("item", "index"):
                text += f"[{key!r}]"
            elif step == "key":
                text += f".keys()[{key}]"
            elif step == "type":
                text = f"type({text})"
            elif step == "call":
                text += "()" if key is None else f"({', '.join(map(repr, key))})"
            else:
                text += {
                    "dict": ".__dict__",
                    "mro": ".__mro__",
                    "closure": ".__closure__",
                    "code": ".__code__",
                    "defaults": ".__defaults__",
                    "kwdefaults": ".__kwdefaults__",
                }[step]
            i += 1
        return text

    def to_json(self) -> dict[str, Any]:
        return {"root": list(self.root), "steps": [[k, encode_key(k, v)] for k, v in self.steps]}

    @classmethod
    def from_json(cls, raw: Any) -> ObjPath:
        root = check_root(raw["root"])
        return cls(root, tuple(decode_step(k, v) for k, v in raw["steps"]))


def check_root(raw: Any) -> tuple[str, ...]:
    """A root as a tuple of strings; ValueError for anything :data:`ROOTS` does not define."""
    if not isinstance(raw, (list, tuple)) or not raw:
        raise ValueError(f"bad path root {raw!r}")
    root = tuple(str(r) for r in raw)
    arity = {"global": 3, "ref": 2, "self": 1, "closure": 2}
    if arity.get(root[0]) != len(root):
        raise ValueError(f"bad path root {raw!r}")
    return root


def encode_key(kind: str, key: Any) -> Any:
    return values.encode(key) if kind in VALUE_KEYS else key


def decode_step(kind: Any, raw: Any) -> tuple[str, Any]:
    """One step from its JSON form; ValueError when the kind or key is not one this reads."""
    kind = str(kind)
    if kind not in STEPS:
        raise ValueError(f"bad path step kind {kind!r}")
    if kind in VALUE_KEYS:
        return kind, values.decode(raw)
    if kind in NAME_KEYS:
        if not isinstance(raw, str):
            raise ValueError(f"bad attribute name {raw!r}")
        return kind, raw
    if kind in INT_KEYS:
        if type(raw) is not int:
            raise ValueError(f"bad position {raw!r}")
        return kind, raw
    return kind, None


# ---------------------------------------------------------------- following a path in Python


def namespace(obj: Any) -> Any:
    """What the ``dict`` step reads: a class's namespace (``vars(cls)``), a ``threading.local``'s
    dict for this thread (its ``__dict__``), else the instance dict, read past any Python
    ``__getattribute__``; PathError when the object has none."""
    if isinstance(obj, type):
        return vars(obj)
    if isinstance(obj, threading.local):  # its attributes live in a dict per thread, its __dict__
        return obj.__dict__
    try:
        return object.__getattribute__(obj, "__dict__")
    except AttributeError as exc:
        raise PathError(f"{type(obj).__name__} object has no instance attributes") from exc


def root_module(name: str) -> Any:
    """The module a global root lives in: imported already, or imported now (PathError)."""
    module = sys.modules.get(name)
    if module is None:
        try:
            module = import_ref(f"{name}:")
        except LookupError as exc:
            raise PathError(str(exc)) from exc
    return module


def root_object(root: tuple[str, ...], self_obj: Any = None, fn: Any = None) -> Any:
    """The object a root names now (``fn``: the entry function, for closure roots)."""
    kind = root[0]
    if kind == "self":
        return self_obj
    if kind == "global":
        module = root_module(root[1])
        try:
            return namespace(module)[root[2]]
        except KeyError as exc:
            raise PathError(f"{root[1]} has no global {root[2]!r}") from exc
    if kind == "ref":
        try:
            return import_ref(root[1])
        except LookupError as exc:
            raise PathError(str(exc)) from exc
    # closure
    code = getattr(fn, "__code__", None)
    if code is None or root[1] not in code.co_freevars:
        raise PathError(f"the entry function has no closure variable {root[1]!r}")
    cell = fn.__closure__[code.co_freevars.index(root[1])]
    try:
        return cell.cell_contents
    except ValueError as exc:
        raise PathError(f"closure variable {root[1]!r} is unbound") from exc


def step(obj: Any, kind: str, key: Any) -> Any:
    """``obj`` followed one step (:data:`STEPS`); PathError when it leads nowhere."""
    try:
        if kind == "getattr":
            return getattr(obj, key)
        if kind == "dict":
            return namespace(obj)
        if kind == "item":
            if isinstance(obj, types.MappingProxyType):  # a class namespace
                return obj[key]
            if not isinstance(obj, dict):
                raise PathError(f"a {type(obj).__name__} is not a dict")
            return dict.__getitem__(obj, key)
        if kind == "index":
            return obj[key]
        if kind == "key":
            if not isinstance(obj, dict):
                raise PathError(f"a {type(obj).__name__} is not a dict")
            return dict_keys(obj)[key]
        if kind == "type":
            return type(obj)
        if kind == "call":
            return obj() if key is None else obj(*key)
        attr = {
            "mro": "__mro__",
            "closure": "__closure__",
            "code": "__code__",
            "defaults": "__defaults__",
            "kwdefaults": "__kwdefaults__",
        }[kind]
        return getattr(obj, attr)
    except PathError:
        raise
    except Exception as exc:
        raise PathError(
            f"no {key!r} ({type(exc).__name__})" if key is not None else f"no {kind} ({type(exc).__name__})"
        ) from exc


def resolve(path: ObjPath, self_obj: Any = None, fn: Any = None, upto: int | None = None) -> Any:
    """The object at ``path`` (its first ``upto`` steps); PathError names the step."""
    obj = root_object(path.root, self_obj, fn)
    steps = path.steps if upto is None else path.steps[:upto]
    for i, (kind, key) in enumerate(steps):
        try:
            obj = step(obj, kind, key)
        except PathError as exc:
            raise PathError(f"{ObjPath(path.root, path.steps[:i]).label()}: {exc}") from exc
    return obj


def assign(path: ObjPath, value: Any, self_obj: Any = None, fn: Any = None) -> Callable[[], None]:
    """Put ``value`` at ``path`` (build side: a weight's stand-in while tracing); returns the
    function that puts the old value back."""
    if not path.steps:
        if path.root[0] != "global":
            raise PathError(f"cannot replace {path.label()} itself")
        holder: Any = namespace(sys.modules[path.root[1]])
        key: Any = path.root[2]
        return _swap_item(holder, key, value)
    kind, key = path.steps[-1]
    parent = resolve(path, self_obj, fn, upto=len(path.steps) - 1)
    if kind == "item":
        return _swap_item(parent, key, value, raw=True)
    if kind == "index":
        if isinstance(parent, tuple):
            raise PathError(f"{path.label()} is inside a tuple, which cannot be changed")
        return _swap_item(parent, key, value)
    if kind == "getattr":
        d = None if isinstance(parent, type) else getattr(parent, "__dict__", None)
        if isinstance(d, dict) and key in d:  # an instance attribute: swap it in place
            return _swap_item(d, key, value)
        old = getattr(parent, key)
        setattr(parent, key, value)
        return lambda: setattr(parent, key, old)
    raise PathError(f"cannot put a value at {path.label()} (its last step is {kind!r})")


def _swap_item(holder: Any, key: Any, value: Any, raw: bool = False) -> Callable[[], None]:
    old = dict.__getitem__(holder, key) if raw else holder[key]
    if raw:
        dict.__setitem__(holder, key, value)
    else:
        holder[key] = value

    def restore() -> None:
        if raw:
            dict.__setitem__(holder, key, old)
        else:
            holder[key] = old

    return restore
