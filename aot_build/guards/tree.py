"""A variant's guards as a tree: what the compiled code depends on beyond its arguments.

Every path a guard reads is a chain of nodes (a root, then one step per node, see
:mod:`.paths`); paths that share a prefix share its nodes, so a model's thousands of guards
store each module once. Each node carries the checks (:mod:`.checks`) made on the object
there. Weights are nodes too: the tensor the library receives is the object at the nodes
checked ``weight i``; ``weights[i]`` is its shape, dtype, device and strides at build time.

Manifest form (compact: lists, not objects)::

    {"nodes": [[parent, step, key, [[kind, expect], ...]], ...], "weights": [spec, ...]}

A root node has parent -1 and its root (``["global", module, name]``, ``["ref", ref]``,
``["self"]``, ``["closure", name]``) in place of step and key. Nodes come after their parent.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..records import TupleRecord, record
from .checks import KINDS, Check
from .paths import ROOTS, ObjPath, check_root, decode_step, encode_key


@record(frozen=True, repr=False)
class TensorSpec:
    """Static description of one tensor (a weight).

    Args:
        shape: exact sizes.
        dtype: torch dtype name without the ``torch.`` prefix, e.g. ``float32``.
        device: device type, e.g. ``cpu`` or ``cuda``.
        stride: exact strides.
        parameter: whether it is an ``nn.Parameter`` (else a plain tensor): code may branch on
            ``isinstance(w, nn.Parameter)``, which the trace answered (None: not recorded,
            manifests of aot-build 0.4 and before).
    """

    shape: tuple[int, ...]
    dtype: str
    device: str
    stride: tuple[int, ...]
    parameter: bool | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "shape": list(self.shape),
            "dtype": self.dtype,
            "device": self.device,
            "stride": list(self.stride),
        }
        if self.parameter is not None:
            out["parameter"] = self.parameter
        return out

    @classmethod
    def from_json(cls, raw: Any) -> TensorSpec:
        parameter = raw.get("parameter")
        return cls(
            tuple(map(int, raw["shape"])),
            str(raw["dtype"]),
            str(raw["device"]),
            tuple(map(int, raw["stride"])),
            None if parameter is None else bool(parameter),
        )


class Node(TupleRecord):
    """One object the guards read: the root or step that reaches it from its parent, and the
    checks made on it (a tuple: thousands are made when an entry is first called)."""

    parent: int
    step: str
    key: Any
    checks: tuple[Check, ...] = ()


class StateTree:
    """See the module docstring. Made in memory (``StateTree(nodes, weights)``, the build) or
    read from a record (:meth:`from_json`): then its nodes are parsed and checked when first
    asked for, and :attr:`raw_nodes` keeps their JSON, which the C evaluator binds straight
    from (``_evaluator.c``'s ``bind``): a first call that passes needs no node objects."""

    __slots__ = ("_nodes", "raw_nodes", "weights")

    def __init__(self, nodes: list[Node] | None = None, weights: list[TensorSpec] | None = None) -> None:
        self._nodes: list[Node] | None = [] if nodes is None else nodes
        self.weights: list[TensorSpec] = [] if weights is None else weights
        #: The nodes as the record holds them (:meth:`from_json`), else None.
        self.raw_nodes: list[Any] | None = None

    @property
    def nodes(self) -> list[Node]:
        """The nodes, parsed now when read from a record (ValueError when one is malformed)."""
        if self._nodes is None:
            assert self.raw_nodes is not None
            self._nodes = _parse_nodes(self.raw_nodes, len(self.weights))
        return self._nodes

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StateTree):
            return NotImplemented
        return self.nodes == other.nodes and self.weights == other.weights

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"StateTree({len(self.nodes)} nodes, {len(self.weights)} weights)"

    def path(self, i: int) -> ObjPath:
        """The path of node ``i`` (from the record's JSON when the nodes are not parsed)."""
        if self._nodes is None:
            return self._raw_path(i)
        steps: list[tuple[str, Any]] = []
        while self._nodes[i].parent >= 0:
            n = self._nodes[i]
            steps.append((n.step, n.key))
            i = n.parent
        root = self._nodes[i]
        return ObjPath((root.step, *root.key), tuple(reversed(steps)))

    def _raw_path(self, i: int) -> ObjPath:
        raw = self.raw_nodes
        assert raw is not None
        steps: list[tuple[str, Any]] = []
        parent, step, key, _ = raw[i]
        while parent >= 0:
            steps.append(decode_step(step, key))
            parent, step, key, _ = raw[parent]
        return ObjPath(check_root([step, *key]), tuple(reversed(steps)))

    def checks(self) -> Iterator[tuple[int, Check]]:
        for i, n in enumerate(self.nodes):
            for c in n.checks:
                yield i, c

    def weight_nodes(self) -> list[list[int]]:
        """Per weight: every node it is read at, the one read on each call first."""
        out: list[list[int]] = [[] for _ in self.weights]
        for i, c in self.checks():
            if c.kind == "weight":
                out[int(c.expect)].append(i)
        return out

    def weight_paths(self) -> list[list[ObjPath]]:
        """Per weight: every path it is read through, the one read on each call first."""
        return [[self.path(i) for i in nodes] for nodes in self.weight_nodes()]

    def count(self) -> dict[str, int]:
        """Checks per kind (``weight`` excluded)."""
        counts: dict[str, int] = {}
        for _, c in self.checks():
            if c.kind != "weight":
                counts[c.kind] = counts.get(c.kind, 0) + 1
        return counts

    def summary(self) -> str:
        """One line for the build log: what the shim checks per call."""
        counts = self.count()
        paths = self.weight_paths()
        tied = sum(len(p) > 1 for p in paths)
        values = [
            self.path(i).label()
            for i, c in self.checks()
            if c.kind == "eq"
            and (self.nodes[i].step != "getattr" or self.nodes[i].key != "training")
            and self.path(i).root[0] in ("global", "self", "closure")
        ]
        shown = ", ".join(values[:6]) + (f", ... ({len(values) - 6} more)" if len(values) > 6 else "")
        kinds = ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        return (
            f"guards {sum(counts.values())} ({kinds or 'none'}) on {len(self.nodes)} paths; "
            f"weights {len(self.weights)}"
            + (f" ({tied} read through several paths)" if tied else "")
            + (f"; values: {shown}" if shown else "")
        )

    def to_json(self) -> dict[str, Any]:
        nodes = []
        for n in self.nodes:
            checks = [[c.kind, c.expect] for c in n.checks]
            if n.parent < 0:
                nodes.append([-1, n.step, list(n.key), checks])
            else:
                nodes.append([n.parent, n.step, encode_key(n.step, n.key), checks])
        return {"nodes": nodes, "weights": [w.to_json() for w in self.weights]}

    @classmethod
    def from_json(cls, raw: Any) -> StateTree:
        """A tree read from a record: its weights now, its nodes when first asked for
        (:attr:`nodes`; the C evaluator binds from :attr:`raw_nodes` without them). ValueError
        (or KeyError/TypeError) on a malformed weight or a node list that is not a list."""
        nodes = raw["nodes"]
        if type(nodes) is not list:
            raise ValueError(f"the guard tree's nodes are a {type(nodes).__name__}, not a list")
        tree = cls(None, [TensorSpec.from_json(w) for w in raw["weights"]])
        tree._nodes = None
        tree.raw_nodes = nodes
        return tree


def _parse_nodes(raw_nodes: list[Any], n_weights: int) -> list[Node]:
    """The nodes of a record's tree; ValueError (or KeyError/TypeError) on anything malformed.
    One pass: an explanation or ``inspect`` parses thousands. A check with a plain expectation
    (a string, an int, a bool, None) is made once per tree and shared by every node that makes
    it: most are the same few (``len 0`` on hook tables, a class's ``type``)."""
    nodes: list[Node] = []
    read: dict[int, int] = {}  # weight -> the first node that reads it
    same: list[tuple[int, Any]] = []
    shared: dict[tuple[str, type, Any], Check] = {}  # by type too: 1, 1.0 and True are ==
    kinds = KINDS
    new = tuple.__new__  # Node(...) and Check(...) without their Python-level __new__
    for i, item in enumerate(raw_nodes):
        if type(item) is not list or len(item) != 4:
            raise ValueError(f"node {i}: a node must be a list of 4 items")
        parent, step, key, raw_checks = item
        if type(parent) is not int or not -1 <= parent < i:
            raise ValueError(f"node {i}: bad parent {parent!r}")
        if type(raw_checks) is not list:
            raise ValueError(f"node {i}: its checks must be a list")
        checks: tuple[Check, ...] = ()
        if raw_checks:
            made = []
            for raw_check in raw_checks:
                if type(raw_check) is not list or len(raw_check) != 2:
                    raise ValueError(f"node {i}: a check must be a list of 2 items")
                kind, expect = raw_check
                if type(kind) is not str or kind not in kinds:
                    raise ValueError(f"node {i}: unknown check kind {kind!r}")
                if kind == "weight" or kind == "same":
                    if type(expect) is not int:
                        raise ValueError(f"node {i}: bad {kind} index {expect!r}")
                    if kind == "weight":
                        read.setdefault(expect, i)
                    else:
                        same.append((i, expect))
                t = type(expect)
                if t is str or t is int or t is bool or expect is None:
                    c = shared.get((kind, t, expect))
                    if c is None:
                        c = shared[(kind, t, expect)] = new(Check, (kind, expect))
                else:
                    c = new(Check, (kind, expect))
                made.append(c)
            checks = tuple(made)
        if parent < 0:
            root = check_root([step, *key])
            nodes.append(new(Node, (-1, root[0], root[1:], checks)))
        elif step == "getattr" and type(key) is str:  # most steps: decode_step's answer, sooner
            nodes.append(new(Node, (parent, step, key, checks)))
        else:
            step_kind, decoded = decode_step(step, key)
            nodes.append(new(Node, (parent, step_kind, decoded, checks)))
    for i, other in same:
        if not 0 <= other < len(nodes):
            raise ValueError(f"node {i}: same as missing node {other}")
    for w, i in read.items():
        if not 0 <= w < n_weights:
            raise ValueError(f"node {i}: missing weight {w}")
    if len(read) != n_weights:
        raise ValueError("a weight is read through no path")
    return nodes


class TreeBuilder:
    """Builds a :class:`StateTree` from (path, check) pairs, sharing prefixes; checks on one
    node are kept once each, in the order added."""

    def __init__(self) -> None:
        self._index: dict[tuple[Any, ...], int] = {}
        self._nodes: list[tuple[int, str, Any]] = []
        self._checks: list[list[Check]] = []
        self.weights: list[TensorSpec] = []

    def node(self, path: ObjPath) -> int:
        if path.root[0] not in ROOTS:
            raise ValueError(f"bad root {path.root!r}")
        key: tuple[Any, ...] = (path.root,)
        i = self._intern(key, -1, path.root[0], path.root[1:])
        for step, arg in path.steps:
            key = (*key, (step, _hashable(arg)))
            i = self._intern(key, i, step, arg)
        return i

    def _intern(self, key: tuple[Any, ...], parent: int, step: str, arg: Any) -> int:
        i = self._index.get(key)
        if i is None:
            i = self._index[key] = len(self._nodes)
            self._nodes.append((parent, step, arg))
            self._checks.append([])
        return i

    def add(self, path: ObjPath, check: Check) -> int:
        i = self.node(path)
        if check not in self._checks[i]:
            self._checks[i].append(check)
        return i

    def tree(self) -> StateTree:
        nodes = [Node(p, s, k, tuple(c)) for (p, s, k), c in zip(self._nodes, self._checks, strict=True)]
        return StateTree(nodes, list(self.weights))


def _hashable(value: Any) -> Any:
    """A key that tells apart values ``==`` merges (``1``, ``1.0`` and ``True``)."""
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_hashable(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((_hashable(k), _hashable(v)) for k, v in value.items()))
    if isinstance(value, (set, frozenset)):
        return (type(value).__name__, repr(sorted(map(repr, value))))
    return (type(value).__name__, value)
