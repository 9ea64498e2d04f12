"""Argument and output structures (pytree specs) in manifests, as JSON.

torch's own ``treespec_dumps`` turns a ``NamedTuple`` into an anonymous namedtuple and cannot
store types that were registered without a serialized name, so outputs would not come back
as the type the Python function returns. Here a node names its type by ``module:qualname``
(resolved again by importing at run time) and stores its context as a plain value::

    null                                      a leaf
    {"type": "tuple", "context": null, "children": [...]}
    {"type": "namedtuple", "context": "pkg.mod:Point", "children": [...]}
    {"type": "transformers.modeling_outputs:BaseModelOutput", "context": {...}, "children": [...]}

:func:`unflattener` turns a stored structure into a fast function from leaves to the object.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from torch.utils import _pytree as pytree

from . import values
from .names import import_ref, qualified_name

_BUILTIN: dict[Any, str] = {
    tuple: "tuple",
    list: "list",
    dict: "dict",
    collections.OrderedDict: "OrderedDict",
    collections.defaultdict: "defaultdict",
    collections.deque: "deque",
    collections.namedtuple: "namedtuple",
}
_BY_NAME = {v: k for k, v in _BUILTIN.items()}


class TreeError(ValueError):
    """A structure cannot be stored (build side) or rebuilt (run side); says which node."""


def encode(spec: pytree.TreeSpec, where: str = "") -> Any:
    """The JSON form of ``spec``; TreeError names the node that cannot be stored."""
    if spec.is_leaf():
        return None
    typ = spec.type
    name = _BUILTIN.get(typ) or qualified_name(typ)
    if name is None:
        raise TreeError(
            f"{where or 'structure'}: {typ!r} is defined locally; define the class at module level"
        )
    context = spec.context
    try:
        if typ is collections.namedtuple:
            ref = qualified_name(context)
            if ref is None:
                raise TreeError(
                    f"{where}: namedtuple {context!r} is defined locally; define it at module level"
                )
            ctx: Any = ref
        elif typ is collections.defaultdict:
            factory = context[0]
            ref = None if factory is None else qualified_name(factory)
            ctx = {"factory": ref, "keys": values.encode(context[1])}
        else:
            ctx = values.encode(context)
    except values.Unencodable as exc:
        dumpable = pytree.SUPPORTED_SERIALIZED_TYPES.get(typ)
        to_dump = getattr(dumpable, "to_dumpable_context", None)
        if to_dump is None:
            raise TreeError(
                f"{where or 'structure'}: the context of {name} ({exc}) has no stored form; "
                "register the type with torch.utils._pytree.register_pytree_node(..., "
                "to_dumpable_context=...) or return plain tuples/dicts"
            ) from exc
        ctx = {"dumped": to_dump(context)}
    children = [encode(c, f"{where}[{i}]") for i, c in enumerate(spec.children())]
    return {"type": name, "context": ctx, "children": children}


def _node_type(name: str) -> Any:
    if name in _BY_NAME:
        return _BY_NAME[name]
    try:
        return import_ref(name)
    except LookupError as exc:
        raise TreeError(str(exc)) from exc


def _context(typ: Any, raw: Any) -> Any:
    if typ is collections.namedtuple:
        return import_ref(str(raw))
    if typ is collections.defaultdict:
        factory = import_ref(raw["factory"]) if raw.get("factory") else None
        return [factory, values.decode(raw["keys"])]
    if isinstance(raw, dict) and "dumped" in raw:
        dumpable = pytree.SUPPORTED_SERIALIZED_TYPES.get(typ)
        from_dump = getattr(dumpable, "from_dumpable_context", None)
        if from_dump is None:
            raise TreeError(f"{typ!r} is not registered with a dumpable context in this process")
        return from_dump(raw["dumped"])
    return values.decode(raw)


def decode(raw: Any) -> pytree.TreeSpec:
    """The TreeSpec :func:`encode` stored (types resolved by importing)."""
    if raw is None:
        return pytree.treespec_leaf()
    try:
        typ = _node_type(str(raw["type"]))
        children = [decode(c) for c in raw["children"]]
        return pytree.TreeSpec(typ, _context(typ, raw["context"]), children)
    except (KeyError, TypeError, LookupError, ValueError) as exc:
        raise TreeError(f"cannot rebuild structure {values.describe(raw)}: {exc}") from exc


def count_leaves(raw: Any) -> int:
    if raw is None:
        return 1
    return sum(count_leaves(c) for c in raw["children"])


def build_expr(raw: Any, leaf: Callable[[int], str], const: Callable[[Any], str]) -> str:
    """A Python expression that builds the stored structure: leaf ``i`` (flatten order) is
    the expression ``leaf(i)``; other objects (types, keys, unflatten functions) are
    referenced through ``const``. Plain containers are built directly, other types through
    their pytree ``unflatten`` (or dataclass fields)."""
    counter = [0]

    def expr(node: Any) -> str:
        if node is None:
            i = counter[0]
            counter[0] += 1
            return leaf(i)
        typ = _node_type(str(node["type"]))
        ctx = _context(typ, node["context"])
        parts = [expr(c) for c in node["children"]]
        if typ is tuple:
            return "(" + "".join(p + ", " for p in parts) + ")"
        if typ is list:
            return "[" + ", ".join(parts) + "]"
        if typ is dict:
            return "{" + ", ".join(f"{const(k)}: {p}" for k, p in zip(ctx, parts, strict=True)) + "}"
        if typ is collections.namedtuple:
            return f"{const(ctx)}({', '.join(parts)})"
        node_def = pytree.SUPPORTED_NODES.get(typ)
        if node_def is not None:
            return f"{const(node_def.unflatten_fn)}([{', '.join(parts)}], {const(ctx)})"
        if dataclasses.is_dataclass(typ):
            # torch.export.register_dataclass context: [[flat field names], [None field names]]
            names, nones = ctx
            kwargs = [f"{const(n)}: {p}" for n, p in zip(names, parts, strict=True)]
            kwargs += [f"{const(n)}: None" for n in nones]
            return f"{const(typ)}(**{{{', '.join(kwargs)}}})"
        raise TreeError(f"{node['type']} is not a registered pytree type in this process")

    return expr(raw)


def compile_builder(
    raw: Any, leaf: Callable[[int, Callable[[Any], str]], str], params: str
) -> Callable[..., Any]:
    """``lambda <params>: <the structure>``, compiled once: leaf ``i`` is the expression
    ``leaf(i, const)``, where ``const(obj)`` names an object the expression may use."""
    consts: list[Any] = []

    def const(value: Any) -> str:
        consts.append(value)
        return f"K[{len(consts) - 1}]"

    body = build_expr(raw, lambda i: leaf(i, const), const)
    fn: Callable[..., Any] = eval(f"lambda {params}: {body}", {"K": consts})
    return fn


def unflattener(raw: Any) -> Callable[[Sequence[Any]], Any]:
    """A function building the stored structure from its leaves, in flatten order."""
    return compile_builder(raw, lambda i, const: f"o[{i}]", "o")
