"""Plain Python values in manifests, as JSON: what guards compare against, what example
arguments bake in and what outputs return as they are.

Scalars (None, bool, int, str, finite float) are stored as themselves; everything else is a
one-key object naming its kind, so a tuple never comes back as a list, nor 1.0 as 1::

    {"tuple": [...]}  {"list": [...]}  {"dict": [[key, value], ...]}  {"float": "nan"}
    {"dtype": "float32"}  {"device": "cuda:0"}  {"enum": "pkg.mod:Color", "name": "RED"}
    {"enum": "pkg.mod:Perm", "value": 3}  (a combination of flags)
    {"bytes": "<hex>"}  {"complex": [re, im]}  {"frozenset": [...]}  {"slice": [a, b, c]}
    {"ellipsis": null}  {"numpy": "float32", "value": 2.0}  {"class": "pkg.mod:Config"}

Guards also compare against sets (``{"set": [...]}``, with ``sets=True``): a set is mutable, so it
is never a plain argument or output. Sets are stored in a fixed order (by their JSON text), so
two builds write the same manifest whatever the hash seed.
"""

from __future__ import annotations

import enum
import json
import math
import sys
from typing import Any

from .names import class_ref, import_ref, qualified_name


class Unencodable(TypeError):
    """The value has no manifest form (an arbitrary object, a set, a callable)."""


def _torch() -> Any:
    import torch

    return torch


def is_plain(value: Any) -> bool:
    """True for values :func:`encode` stores (checked without encoding)."""
    try:
        encode(value)
    except Unencodable:
        return False
    return True


def encode(value: Any, sets: bool = False) -> Any:
    """The JSON form of ``value``; :class:`Unencodable` when it has none. ``sets``: also
    mutable sets (guard constants)."""
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is tuple:
        return {"tuple": [encode(v, sets) for v in value]}
    if kind is list:
        return {"list": [encode(v, sets) for v in value]}
    if kind is dict:
        return {"dict": [[encode(k, sets), encode(v, sets)] for k, v in value.items()]}
    if kind is bytes:
        return {"bytes": value.hex()}
    if kind is complex:
        return {"complex": [encode(value.real), encode(value.imag)]}
    if kind is frozenset or (kind is set and sets):
        items = sorted((encode(v, sets) for v in value), key=lambda e: json.dumps(e, sort_keys=True))
        return {kind.__name__: items}
    if kind is slice:
        return {"slice": [encode(value.start), encode(value.stop), encode(value.step)]}
    if value is Ellipsis:
        return {"ellipsis": None}
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.generic) and kind.__module__ == "numpy":
        item = value.item()
        if type(item) not in (bool, int, float, complex):
            raise Unencodable(f"numpy value {_short(value)}")
        return {"numpy": str(value.dtype), "value": encode(item)}
    if isinstance(value, enum.Enum):
        ref = qualified_name(kind)
        if ref is None:
            raise Unencodable(f"enum member {value!r} of a local class")
        if value.name is not None and kind.__members__.get(value.name) is value:
            return {"enum": ref, "name": value.name}
        # a combination of flags (Flag.A | Flag.B): no member of its own, found by its value
        return {"enum": ref, "value": encode(value.value)}
    if isinstance(value, type):  # a class found again by import (a key of a dispatch table)
        ref = class_ref(value)
        if ref is None:
            raise Unencodable(f"class {value.__qualname__}, defined inside a function")
        return {"class": ref}
    torch = sys.modules.get("torch")
    if torch is not None:
        if kind is torch.Size:
            return {"tuple": [int(v) for v in value]}
        if kind is torch.dtype:
            return {"dtype": str(value).removeprefix("torch.")}
        if kind is torch.device:
            return {"device": str(value)}
    raise Unencodable(f"{kind.__module__}.{kind.__qualname__} value {_short(value)}")


def decode(raw: Any) -> Any:
    """The value :func:`encode` stored; ValueError for anything it did not write."""
    if raw is None or type(raw) in (bool, int, str, float):
        return raw
    if not isinstance(raw, dict) or len(raw) not in (1, 2):
        raise ValueError(f"not an encoded value: {_short(raw)}")
    if "tuple" in raw:
        return tuple(decode(v) for v in _list(raw["tuple"]))
    if "list" in raw:
        return [decode(v) for v in _list(raw["list"])]
    if "dict" in raw:
        return {decode(k): decode(v) for k, v in (_pair(p) for p in _list(raw["dict"]))}
    if "float" in raw:
        return float(str(raw["float"]))
    if "dtype" in raw:
        dtype = getattr(_torch(), str(raw["dtype"]), None)
        if not isinstance(dtype, _torch().dtype):
            raise ValueError(f"unknown dtype {raw['dtype']!r}")
        return dtype
    if "device" in raw:
        return _torch().device(str(raw["device"]))
    if "bytes" in raw:
        return bytes.fromhex(str(raw["bytes"]))
    if "complex" in raw:
        re, im = (decode(v) for v in _list(raw["complex"]))
        return complex(re, im)
    if "frozenset" in raw:
        return frozenset(decode(v) for v in _list(raw["frozenset"]))
    if "set" in raw:
        return {decode(v) for v in _list(raw["set"])}
    if "slice" in raw:
        return slice(*(decode(v) for v in _list(raw["slice"])))
    if "ellipsis" in raw:
        return Ellipsis
    if "numpy" in raw:
        import numpy

        dtype = getattr(numpy, str(raw["numpy"]), None)
        if not (isinstance(dtype, type) and issubclass(dtype, numpy.generic)):
            raise ValueError(f"unknown numpy type {raw['numpy']!r}")
        return dtype(decode(raw["value"]))
    if "enum" in raw:
        try:
            cls = import_ref(str(raw["enum"]))
            if "value" in raw:
                return cls(decode(raw["value"]))
            # the member the class holds under that name, not what its _member_map_ (which
            # cls[name] reads, and a check of that table compares with) holds now
            held = vars(cls).get(str(raw["name"])) if isinstance(cls, type) else None
            return held if isinstance(held, cls) else cls[str(raw["name"])]
        except (LookupError, TypeError, ValueError) as exc:
            raise ValueError(f"enum {raw['enum']}.{raw.get('name', raw.get('value'))}: {exc}") from exc
    if "class" in raw:
        try:
            cls = import_ref(str(raw["class"]))
        except LookupError as exc:
            raise ValueError(f"class {raw['class']}: {exc}") from exc
        if not isinstance(cls, type):
            raise ValueError(f"{raw['class']} is not a class")
        return cls
    raise ValueError(f"not an encoded value: {_short(raw)}")


def same(value: Any, expected: Any) -> bool:
    """Equal, and of the same type at every level of tuples, lists, dicts and sets (``1`` is
    not ``1.0`` nor ``True``, ``(1, 2)`` not ``(1, 2.0)``, ``{1}`` not ``{1.0}``); floats of
    the same sign too (``-0.0`` is not ``0.0``: ``x / K`` differs); NaN equals NaN. Never
    raises: an object whose ``==`` fails is not the same."""
    kind = type(expected)
    if type(value) is not kind:
        return False
    if kind is float:
        return _same_float(value, expected)
    if kind is complex:
        return _same_float(value.real, expected.real) and _same_float(value.imag, expected.imag)
    if kind in (set, frozenset):
        try:
            if len(value) != len(expected) or value != expected:
                return False
            stored = {x: x for x in value}  # the element equal to each expected one
            return all(same(stored[x], x) for x in expected)
        except Exception:
            return False
    if kind in (tuple, list):
        return len(value) == len(expected) and all(map(same, value, expected))
    if kind is dict:
        return len(value) == len(expected) and all(
            same(k1, k2) and same(v1, v2)
            for (k1, v1), (k2, v2) in zip(value.items(), expected.items(), strict=True)
        )
    try:
        return bool(value == expected)
    except Exception:
        return False


def _same_float(x: float, y: float) -> bool:
    if x == y:
        return math.copysign(1.0, x) == math.copysign(1.0, y)
    return math.isnan(x) and math.isnan(y)


def describe(value: Any) -> str:
    """A short repr for messages."""
    return _short(value)


def _short(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _list(raw: Any) -> list[Any]:
    if not isinstance(raw, list):
        raise ValueError(f"expected a list, got {_short(raw)}")
    return raw


def _pair(raw: Any) -> tuple[Any, Any]:
    if not isinstance(raw, list) or len(raw) != 2:
        raise ValueError(f"expected a [key, value] pair, got {_short(raw)}")
    return raw[0], raw[1]
