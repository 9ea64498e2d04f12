"""Guards and weights of manifests before format 4 (aot-build 0.1 to 0.3), read into a tree.

Those builds recorded the reads they saw with their own recorder, as flat lists: ``guards``
(``value``, ``type``, ``ident``, ``absent``, ``len``, ``keys``, ``same`` on a path) and
``weights`` (paths and a spec). Their paths used steps of their own (``attr``: an instance
attribute, ``param``/``buffer``/``child``: an nn.Module table, ``item``, ``getattr``); each
becomes today's steps. The checks keep their meaning, so such a wheel runs as it did.
"""

from __future__ import annotations

from typing import Any

from .checks import Check
from .paths import ObjPath, check_root
from .tree import StateTree, TensorSpec, TreeBuilder

_TABLES = {"param": "_parameters", "buffer": "_buffers", "child": "_modules"}


def _path(raw: Any) -> ObjPath:
    path = ObjPath(check_root(raw["root"]))
    for kind, key in raw["steps"]:
        if kind == "attr":
            path = path.child("dict").child("item", key)
        elif kind in _TABLES:
            path = path.child("getattr", _TABLES[kind]).child("item", key)
        elif kind == "item":
            path = path.child("index", key)
        elif kind == "getattr":
            path = path.child("getattr", str(key))
        else:
            raise ValueError(f"bad path step kind {kind!r}")
    return path


def upgrade_state(guards: Any, weights: Any) -> StateTree:
    """The tree of a format 1-3 variant's ``guards`` and ``weights``; ValueError when malformed."""
    builder = TreeBuilder()
    for i, w in enumerate(weights):
        for raw in w["paths"]:
            builder.add(_path(raw), Check("weight", i))
        builder.weights.append(TensorSpec.from_json(w["spec"]))
    for g in guards:
        path, kind, expect = _path(g["path"]), str(g["kind"]), g.get("expect")
        if kind == "value":
            builder.add(path, Check("eq", expect))
        elif kind == "type":
            builder.add(path, Check("type", str(expect)))
        elif kind == "ident":
            builder.add(path, Check("id", {"ref": str(expect)}))
        elif kind == "absent":
            if not path.steps:
                raise ValueError("an absent guard needs an attribute")
            parent, (_, name) = path.parent(), path.steps[-1]
            if expect == "method":  # found on the class: not shadowed by the instance
                builder.add(parent.child("dict"), Check("lacks", name))
            else:
                builder.add(parent, Check("hasattr", [str(name), False]))
        elif kind == "len":
            builder.add(path, Check("len", int(expect)))
        elif kind == "keys":
            builder.add(path, Check("keys", expect))
        elif kind == "same":
            other = builder.node(_path(expect))
            builder.add(path, Check("same", other))
        else:
            raise ValueError(f"unknown guard kind {kind!r}")
    return builder.tree()
