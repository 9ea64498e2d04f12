"""Run side: a variant's guard tree bound in this process, checked on every call.

Binding (once, when the entry is first called) resolves what the manifest names by reference:
modules and classes by importing them, identities of local functions by their code, globals
to their module's namespace, closure variables to the entry function's cells. What is left is
a flat program, one instruction per node (read the object from its parent, then run its
checks). The C evaluator's ``bind`` makes it straight from the record's JSON lists, asking
:class:`_Binder` only for what needs Python (UNet's 2,470 nodes: ~1.3 ms, against ~7 ms to
parse the tree into Python objects and bind those); :meth:`BoundState._bind` makes the same
program from the parsed tree, the reference and what runs without it. An evaluator runs the
program on every call:

* the native evaluator (``_evaluator.c``, compiled into the wheel by the build), which also
  skips the subtrees whose dicts have not changed since the last passing check;
* :meth:`BoundState.check_python`, the same program in Python: the reference, and what runs
  when the wheel ships no native evaluator.

A check returns -1 when everything holds, else a failure code that :meth:`BoundState.explain`
turns into a sentence naming the path and what changed.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from .. import values
from ..names import import_ref
from .checks import KINDS, MISSING, Check, problem
from .paths import (
    ObjPath,
    PathError,
    check_root,
    dict_keys,
    namespace,
    resolve,
    root_module,
    root_object,
    step,
)
from .tree import StateTree

#: Node opcodes (the C evaluator uses the same numbers).
OP_REF, OP_GLOBAL, OP_SELF, OP_CELL = 0, 1, 2, 3
STEP_OPS = {
    "getattr": 10,
    "dict": 11,
    "item": 12,
    "index": 13,
    "key": 14,
    "type": 15,
    "mro": 16,
    "closure": 17,
    "code": 18,
    "defaults": 19,
    "kwdefaults": 20,
    "call": 21,
}
#: Failure codes at or above this are "reading node (code - READ_FAILED) raised".
READ_FAILED = 1 << 24
#: The evaluators' program: per node ``(parent, op, key, ((code, opcode, const), ...))``.
Program = list[tuple[int, int, Any, tuple[tuple[int, int, Any], ...]]]


class BindError(Exception):
    """The tree cannot be bound in this process (a malformed record); the entry falls back."""


class BoundState:
    """See the module docstring.

    Args:
        tree: the variant's state tree.
        fn: the entry's own function (its closure cells are closure roots).
        native: the native evaluator module, or None.
    """

    def __init__(self, tree: StateTree, fn: Callable[..., Any], native: Any = None) -> None:
        self.tree = tree
        self.fn = fn
        #: Per weight, the nodes it is read at (the first one is read on each call).
        self.weight_nodes: list[list[int]]
        bind = getattr(native, "bind", None)  # evaluators built before it bind in Python
        if bind is not None and tree.raw_nodes is not None:
            try:
                self.program, self.weight_nodes = bind(tree.raw_nodes, len(tree.weights), _Binder(self))
            except (ValueError, TypeError) as exc:
                raise BindError(str(exc)) from exc
        else:
            self.program, self.weight_nodes = self._bind()
        #: The entry's top-level package: the ``id`` checks of its functions also keep their code
        #: (see :attr:`pinned_code`; the C evaluator applies the same rule as it loads).
        self.package = (getattr(fn, "__module__", None) or "").partition(".")[0]
        self._pinned: dict[int, Any] | None = None
        self._flat: list[tuple[int, Check]] | None = None
        self._opcodes: list[int] | None = None
        self._weight_paths: list[list[ObjPath]] | None = None
        if native is None:
            self._native = None
        elif getattr(native, "PINS_CODE", 0) and self.package:  # earlier evaluators: the program only
            self._native = native.Evaluator(self.program, self.package)
        else:
            self._native = native.Evaluator(self.program)
        self.check: Callable[[Any, Any], int] = (
            self._native.check if self._native is not None else self.check_python
        )

    @property
    def native(self) -> bool:
        return self._native is not None

    # ------------------------------------------------------------------ binding

    @property
    def flat(self) -> list[tuple[int, Check]]:
        """(node, check) of every check, in program order: a failure code indexes it (made
        when first asked for: explaining a failure)."""
        if self._flat is None:
            self._flat = list(self.tree.checks())
        return self._flat

    @property
    def pinned_code(self) -> dict[int, Any]:
        """Per ``id`` check of a function of the entry's own package (by failure code), its code
        when bound: a reload of the package (IPython's autoreload) replaces functions' code in
        place (``f.__code__ = ...``). torch's and other libraries' functions are not pinned: each
        pin costs a read of the function on every call (~25 ns, a cache miss). Found on first
        use (the Python check, an explanation): the C evaluator finds its own as it loads."""
        if self._pinned is None:
            package = self.package
            self._pinned = {
                code: const.__code__
                for *_, checks in self.program
                for code, opcode, const in checks
                if opcode == _ID
                and type(const) is types.FunctionType
                and package
                and (const.__module__ or "").partition(".")[0] == package
            }
        return self._pinned

    @property
    def consts(self) -> list[Any]:
        """The bound constant of each check, aligned with :attr:`flat`."""
        return [const for *_, checks in self.program for _, _, const in checks]

    def _bind(self) -> tuple[Program, list[list[int]]]:
        """The evaluator's program and :attr:`weight_nodes`, in Python: the reference for the
        C evaluator's ``bind``, and what runs without it. A check the tree shares between
        nodes (plain ones are made once per tree) is bound once."""
        program: Program = []
        refs: dict[tuple[str, str], Any] = {}  # the classes and objects named, each resolved once
        bound: dict[int, tuple[int, Any]] = {}  # id(check) -> (opcode, const)
        weight_nodes: list[list[int]] = [[] for _ in self.tree.weights]
        code = 0
        step_ops, weight = STEP_OPS, KINDS["weight"].opcode
        for i, (parent, kind, key, node_checks) in enumerate(self.tree.nodes):
            if parent < 0:
                op, key = self._root(kind, key)
            else:
                op = step_ops[kind]
            if not node_checks:
                program.append((parent, op, key, ()))
                continue
            checks = []
            for c in node_checks:
                hit = bound.get(id(c))
                if hit is None:
                    hit = self._bind_check(i, c, refs)
                    if not isinstance(c.expect, dict):  # an identity by code binds to what is at i
                        bound[id(c)] = hit
                opcode, const = hit
                if opcode == weight:
                    weight_nodes[const].append(i)
                checks.append((code, opcode, const))
                code += 1
            program.append((parent, op, key, tuple(checks)))
        return program, weight_nodes

    def _bind_check(self, i: int, c: Check, refs: dict[tuple[str, str], Any]) -> tuple[int, Any]:
        """Check ``c`` of node ``i``: its opcode and its constant in this process."""
        ckind, expect = c
        kind = KINDS[ckind]
        try:
            if ckind == "type" or ckind == "id":
                # a local function's code is recognised by its fingerprint, at its path now; a
                # class made at run time by the class of the object at its path now
                if isinstance(expect, dict) and ("code" in expect or "made" in expect):
                    return kind.opcode, kind.bind(expect, self._found(i))
                named = (ckind, str(expect))
                if named not in refs:
                    refs[named] = kind.bind(expect, None)
                return kind.opcode, refs[named]
            return kind.opcode, kind.bind(expect, None)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise BindError(f"node {i} ({self.tree.path(i).label()}): bad {ckind} check: {exc}") from exc

    def _root(self, kind: str, key: tuple[Any, ...]) -> tuple[int, Any]:
        if kind == "self":
            return OP_SELF, None
        if kind == "global":
            try:
                module = root_module(key[0])
            except PathError as exc:
                raise BindError(str(exc)) from exc
            return OP_GLOBAL, (vars(module), key[1])
        if kind == "closure":
            code = self.fn.__code__
            if key[0] not in code.co_freevars:
                raise BindError(f"the entry function has no closure variable {key[0]!r}")
            cells = self.fn.__closure__ or ()
            return OP_CELL, cells[code.co_freevars.index(key[0])]
        try:
            return OP_REF, import_ref(key[0])
        except LookupError as exc:
            raise BindError(str(exc)) from exc

    def _found(self, i: int) -> Any:
        try:
            return resolve(self.tree.path(i), None, self.fn)
        except PathError:
            return MISSING

    # ------------------------------------------------------------------ checking

    def check_python(self, self_obj: Any, weights: Any) -> int:
        """-1 when every check holds, else the failure code (see :meth:`explain`). ``same``
        checks (aliases) run after every node is read: their other node may come later."""
        objs: list[Any] = [None] * len(self.program)
        aliases: list[tuple[int, Any, int]] = []
        pins = self.pinned_code
        for i, (parent, op, key, checks) in enumerate(self.program):
            try:
                obj = _read(op, key, objs[parent] if parent >= 0 else self_obj)
            except Exception:
                return READ_FAILED + i
            objs[i] = obj
            for code, opcode, const in checks:
                if opcode == 9:  # same: the object at another node
                    aliases.append((code, obj, const))
                    continue
                try:
                    ok = obj is weights[const] if opcode == 11 else _HOLDS[opcode](obj, const)
                    if ok and opcode == _ID and code in pins:
                        ok = obj.__code__ is pins[code]
                except Exception:
                    ok = False
                if not ok:
                    return code
        for code, obj, other in aliases:
            if obj is not objs[other]:
                return code
        return -1

    def explain(self, code: int, self_obj: Any, weights: Any = None) -> str:
        """What failure ``code`` means now, in words."""
        if code >= READ_FAILED:
            i = code - READ_FAILED
            path = self.tree.path(i)
            try:
                resolve(path, self_obj, self.fn)
            except PathError as exc:
                return f"{path.label()} no longer exists ({exc})"
            return f"{path.label()} could not be read"
        i, check = self.flat[code]
        path = self.tree.path(i)
        try:
            obj = resolve(path, self_obj, self.fn)
        except PathError as exc:
            return f"{path.label()} no longer exists ({exc})"
        if check.kind == "same":
            return KINDS["same"].explain(path.label(), obj, self.tree.path(int(check.expect)).label())
        if check.kind == "weight":
            first = self.weight_paths()[int(check.expect)][0]
            if first != path and weights is not None and obj is not weights[int(check.expect)]:
                # the weights were read again by their first paths: this one leads elsewhere
                return (
                    f"weight {path.label()} is no longer the same tensor as {first.label()} "
                    "(one tensor when compiled)"
                )
            return f"weight {path.label()} was replaced"
        pinned = self.pinned_code.get(code)
        if pinned is not None and obj is self.consts[code] and obj.__code__ is not pinned:
            return (
                f"{path.label()}.__code__ was replaced (a reload?); compiled for the code it had when "
                "the package was imported"
            )
        return problem(check, path.label(), obj, self.consts[code]) or (
            f"{path.label()} changed while the call was being checked"
        )

    def is_weight(self, code: int) -> bool:
        """Whether failure ``code`` is a weight that is not the one held (replaced, or never
        read): read the weights again and retry."""
        weight = KINDS["weight"].opcode
        if code >= READ_FAILED:
            i = code - READ_FAILED
            return 0 <= i < len(self.program) and any(op == weight for _, op, _ in self.program[i][3])
        if self._opcodes is None:
            self._opcodes = [op for *_, checks in self.program for _, op, _ in checks]
        return 0 <= code < len(self._opcodes) and self._opcodes[code] == weight

    def weight_paths(self) -> list[list[ObjPath]]:
        if self._weight_paths is None:
            self._weight_paths = [[self.tree.path(i) for i in nodes] for nodes in self.weight_nodes]
        return self._weight_paths

    def weight_labels(self) -> list[str]:
        """Each weight's first path, in words."""
        return [paths[0].label() for paths in self.weight_paths()]

    def gather(self, self_obj: Any) -> list[Any]:
        """The tensors at each weight's first path now (PathError when one is missing). Each
        node is read once: a model's weights share most of their paths. The C evaluator reads
        them as its check does (UNet's 144 weights: 16 µs against 154 µs in Python, warm)."""
        if self._native is not None:
            try:
                return list(self._native.read(self_obj, tuple(first[0] for first in self.weight_nodes)))
            except Exception:  # read again below: its PathError names the step that failed
                pass
        nodes = self.tree.nodes
        objs: dict[int, Any] = {}

        def at(i: int) -> Any:
            obj = objs.get(i, MISSING)
            if obj is MISSING:
                n = nodes[i]
                if n.parent < 0:
                    obj = root_object((n.step, *n.key), self_obj, self.fn)
                else:
                    obj = step(at(n.parent), n.step, n.key)
                objs[i] = obj
            return obj

        try:
            return [at(first[0]) for first in self.weight_nodes]
        except PathError:  # again by whole paths, for the message naming where it ends
            return [resolve(paths[0], self_obj, self.fn) for paths in self.weight_paths()]


class _Binder:
    """What the C evaluator's ``bind`` asks of Python while it binds a record's nodes: the
    same answers as :meth:`BoundState._bind` gives itself."""

    def __init__(self, state: BoundState) -> None:
        self.state = state

    def root(self, kind: Any, key: Any, i: int) -> tuple[int, Any]:
        """A root node's opcode and bound key."""
        root = check_root([kind, *key])
        return self.state._root(root[0], root[1:])

    def cls(self, expect: Any, i: int | None = None) -> Any:
        """The class a ``type`` check names (one made at run time: the class of the object at
        node ``i`` now, when it is that class)."""
        return KINDS["type"].bind(expect, self.state._found(i) if i is not None else None)

    def identity(self, expect: Any, i: int) -> Any:
        """The object an ``id`` check at node ``i`` names (a local function's code: the code
        there now, when it is the same code)."""
        code = isinstance(expect, dict) and "code" in expect
        return KINDS["id"].bind(expect, self.state._found(i) if code else None)

    @staticmethod
    def value(raw: Any) -> Any:
        """An encoded value (a step's key, a check's expectation)."""
        return values.decode(raw)


def _read(op: int, key: Any, parent: Any) -> Any:
    if op == 10:
        return getattr(parent, key)
    if op == 12:
        if type(parent) is dict:
            return parent[key]
        if isinstance(parent, dict):
            return dict.__getitem__(parent, key)
        return parent[key]  # a class namespace (mappingproxy)
    if op == 11:
        return namespace(parent)
    if op == OP_GLOBAL:
        return key[0][key[1]]
    if op == OP_REF:
        return key
    if op == OP_SELF:
        return parent
    if op == OP_CELL:
        return key.cell_contents
    if op == 13:
        return parent[key]
    if op == 14:
        if not isinstance(parent, dict):
            raise TypeError("not a dict")
        return dict_keys(parent)[key]
    if op == 15:
        return type(parent)
    if op == 21:
        return parent() if key is None else parent(*key)
    return getattr(parent, _DUNDER[op])


_DUNDER = {16: "__mro__", 17: "__closure__", 18: "__code__", 19: "__defaults__", 20: "__kwdefaults__"}
_HOLDS = {k.opcode: k.holds for k in KINDS.values()}
_ID = KINDS["id"].opcode
