"""Generate one variant's per-call check as a single straight-line Python function.

The function takes ``self`` (or None) and the flattened arguments, and either returns the
tuple of tensors to pass to the library (tensor arguments, then weights) or the number of
the first check that failed. It does, in order:

* the arguments: type, dtype, rank, every dimension (fixed sizes, symbol ranges, equal
  sizes for a shared symbol, derived sizes), layout, device, plain values;
* every guard on package state (``manifest.GUARD_KINDS``), walking each path once, with
  shared prefixes in local variables;
* every weight, read by its path (tied paths checked to hold the same tensor), and their
  metadata in one C++ call (torch's ``TensorGuards``: dtype, device, sizes, strides,
  requires_grad) against the weights seen when the check was last (re)built.

Nothing from the manifest is pasted into the source as code: names and values are passed
as constants (``K[i]``); only attribute names that are Python identifiers appear as such.
Any exception inside (a path that no longer exists) is a failed check too.
"""

from __future__ import annotations

import keyword
import math
import operator
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from .. import paths, values
from ..manifest import UNBOUNDED, Guard, InputTensor, ObjPath, TensorSpec, Variant
from ..names import resolve

_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)
_ACCESS = {"param": "_parameters", "buffer": "_buffers", "child": "_modules"}

#: Returned by a check when an exception (not a failed comparison) stopped it.
EXCEPTION = -2
#: Returned by a check when the weights' metadata differs from the last verified one.
WEIGHTS_CHANGED = -1


def _dtype(name: str) -> torch.dtype:
    d = getattr(torch, name, None)
    if not isinstance(d, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in manifest")
    return d


class _PythonTensorGuards:
    """Stand-in for torch's C++ TensorGuards: the same facts, checked in Python."""

    def __init__(self, *tensors: torch.Tensor) -> None:
        self.facts = [(t.dtype, t.device, t.shape, t.stride(), t.requires_grad) for t in tensors]

    def check(self, *tensors: torch.Tensor) -> bool:
        return len(tensors) == len(self.facts) and all(
            (t.dtype, t.device, t.shape, t.stride(), t.requires_grad) == f
            for t, f in zip(tensors, self.facts, strict=True)
        )


def tensor_guards(tensors: tuple[torch.Tensor, ...]) -> Any:
    """A fast checker that ``tensors`` keep their current metadata."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        sizes: list[Any] = [list(t.shape) for t in tensors]
        strides: list[Any] = [list(t.stride()) for t in tensors]
        return TensorGuards(*tensors, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)
    except (ImportError, TypeError, RuntimeError):
        return _PythonTensorGuards(*tensors)


class _AlwaysTrue:
    @staticmethod
    def check(*_: Any) -> bool:
        return True


@dataclass
class Failure:
    """What a failed check means: the fallback reason, a stable key for warning once,
    and a function that describes the failure for this call."""

    reason: str
    key: str
    explain: Callable[..., str]


class _Source:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.consts: list[Any] = []
        self.failures: list[Failure] = []
        self._const_ids: dict[int, str] = {}

    def const(self, value: Any) -> str:
        key = id(value)
        if key in self._const_ids and self.consts[int(self._const_ids[key][2:-1])] is value:
            return self._const_ids[key]
        self.consts.append(value)
        name = f"K[{len(self.consts) - 1}]"
        self._const_ids[key] = name
        return name

    def fail(self, reason: str, key: str, explain: Callable[..., str]) -> str:
        self.failures.append(Failure(reason, key, explain))
        return f"return {len(self.failures) - 1}"

    def emit(self, line: str) -> None:
        self.lines.append("    " + line)

    def require(self, cond: str, reason: str, key: str, explain: Callable[..., str]) -> None:
        """Emit: when ``cond`` holds, the call fails this check."""
        self.emit(f"if {cond}: {self.fail(reason, key, explain)}")


def _attr(expr: str, name: Any, src: _Source) -> str:
    if (
        isinstance(name, str)
        and name.isidentifier()
        and not keyword.iskeyword(name)
        and not name.startswith("__")
    ):
        return f"{expr}.{name}"
    return f"getattr({expr}, {src.const(name)})"


def _describe_value(v: Any) -> str:
    return f"{type(v).__name__} {values.describe(v)}"


class CheckBuilder:
    """Builds the check of one variant; see the module docstring.

    Args:
        variant: the manifest record.
        cuda: whether the variant has CUDA artifacts.
        size_one: symbols some other variant serves at size 1.
        trains: the variant has training artifacts: tensors requiring grad are its to serve.
    """

    def __init__(
        self, variant: Variant, cuda: bool, size_one: frozenset[str] = frozenset(), trains: bool = False
    ) -> None:
        self.v = variant
        self.cuda = cuda
        self.trains = trains
        self.size_one = size_one
        self.src = _Source()
        self._vars: dict[ObjPath, str] = {}
        self._classes: dict[ObjPath, type] = {}
        self._n = 0

    def _new(self) -> str:
        self._n += 1
        return f"v{self._n}"

    # ------------------------------------------------------------------ arguments

    def _inputs(self) -> list[str]:
        src, v = self.src, self.v
        tensors: list[str] = []
        syms: dict[str, str] = {}
        first_tensor = True
        for i, lf in enumerate(v.leaves):
            a = f"a{i}"
            label = v.label(i)
            if lf.tensor is None:
                expected = values.decode(lf.value)
                fail = src.fail(
                    "inputs",
                    f"{label} value",
                    lambda s, args, i=i, label=label, e=expected: (
                        f"{label} is {_describe_value(args[i])}, compiled for {_describe_value(e)}"
                    ),
                )
                if expected is None or type(expected) is bool:
                    src.emit(f"if {a} is not {expected!r}: {fail}")
                elif type(expected) is float and math.isnan(expected):
                    src.emit(f"if type({a}) is not float or {a} == {a}: {fail}")
                else:
                    kind = src.const(type(expected))
                    src.emit(f"if type({a}) is not {kind} or {a} != {_lit(expected, src)}: {fail}")
                continue
            spec = lf.tensor
            tensors.append(a)
            src.require(
                f"type({a}) is not T0 and type({a}) is not T1",
                "inputs",
                f"{label} type",
                lambda s, args, i=i, label=label: (
                    f"{label} is {type(args[i]).__name__}, compiled for a torch.Tensor"
                ),
            )
            dtype = _dtype(spec.dtype)
            src.require(
                f"{a}.dtype is not {src.const(dtype)}",
                "inputs",
                f"{label} dtype",
                lambda s, args, i=i, label=label, d=spec.dtype: (
                    f"{label} is {str(args[i].dtype)[6:]}, compiled for {d}"
                ),
            )
            if not self.cuda:
                src.require(
                    f"not {a}.is_cpu",
                    "device",
                    f"{label} device",
                    lambda s, args, i=i, label=label: (
                        f"{label} is on {args[i].device}, artifacts are for the CPU"
                    ),
                )
            elif first_tensor:
                src.emit(f"dev = {a}.device")
            else:
                src.require(
                    f"{a}.device != dev",
                    "device",
                    f"{label} device",
                    lambda s, args, i=i, label=label: (
                        f"{label} is on {args[i].device}, another argument is not"
                    ),
                )
            first_tensor = False
            sh = f"s{i}"
            src.emit(f"{sh} = {a}.shape")
            rank = len(spec.dims)
            src.require(
                f"len({sh}) != {len(spec.dims)}",
                "inputs",
                f"{label} rank",
                lambda s, args, i=i, label=label, n=rank: (
                    f"{label} has {args[i].dim()} dimensions, compiled for {n}"
                ),
            )
            for j, d in enumerate(spec.dims):
                self._dim(a, sh, i, j, d, label, syms)
            self._layout(a, i, label, spec)
        return tensors

    def _layout(self, a: str, i: int, label: str, spec: InputTensor) -> None:
        src = self.src
        if spec.layout == "strides":
            cond = f"{a}.stride() != {src.const(tuple(spec.stride))}"
            explain = f"has strides {{}}, compiled for {spec.stride}"
        elif spec.layout == "channels_last":
            cond = f"not {a}.is_contiguous(memory_format={src.const(torch.channels_last)})"
            explain = "is not channels_last; pass .contiguous(memory_format=torch.channels_last)"
        else:
            cond = f"not {a}.is_contiguous()"
            explain = "is not contiguous; pass a contiguous tensor (.contiguous())"
        src.require(
            f"{cond}",
            "inputs",
            f"{label} layout",
            lambda s, args: f"{label} " + explain.format(args[i].stride()),
        )

    def _dim(self, a: str, sh: str, i: int, j: int, d: Any, label: str, syms: dict[str, str]) -> None:
        src = self.src
        what = f"{label} dimension {j}"

        def size(args: tuple[Any, ...]) -> int:
            return int(args[i].shape[j])

        if isinstance(d, int):
            fail = src.fail("inputs", what, lambda s, args: f"{what} is {size(args)}, compiled for {d}")
            src.emit(f"if {sh}[{j}] != {d}: {fail}")
            return
        sym, mul, add = (d, 1, 0) if isinstance(d, str) else (d["sym"], d["mul"], d["add"])
        lo, hi = self.v.symbols.get(sym, (0, UNBOUNDED))
        rng = f"{lo}..{hi if hi < UNBOUNDED else 'inf'}" + (
            " (and 1, by its own artifact)" if sym in self.size_one else ""
        )
        if sym in syms:
            src.require(
                f"{sh}[{j}] != {mul} * {syms[sym]} + {add}",
                "inputs",
                what,
                lambda s, args: (
                    f"{what} is {size(args)}, compiled to equal {mul}*{sym}+{add} of the other arguments"
                ),
            )
            return
        var = f"sym{len(syms)}"
        syms[sym] = var
        fail = src.fail(
            "inputs",
            f"{what} range",
            lambda s, args: (
                f"{what} ({sym}) is {size(args)}, compiled for {sym} {rng}"
                + (f" (size = {mul}*{sym}+{add})" if (mul, add) != (1, 0) else "")
            ),
        )
        if (mul, add) == (1, 0):
            src.emit(f"{var} = {sh}[{j}]")
        else:
            src.emit(f"{var}, rem = divmod({sh}[{j}] - {add}, {mul})")
            src.emit(f"if rem: {fail}")
        src.emit(f"if not {lo} <= {var} <= {hi}: {fail}")

    # ------------------------------------------------------------------ package state

    def _path(self, path: ObjPath) -> str:
        """A local variable holding the object at ``path`` (emitting the reads)."""
        if path in self._vars:
            return self._vars[path]
        src = self.src
        if not path.steps and path.root[0] == "self":
            return "a_self"
        var = self._new()
        if not path.steps:
            module_dict = paths.root_object(path).__dict__
            src.emit(f"{var} = {src.const(module_dict)}[{_lit(path.root[2], src)}]")
        else:
            src.emit(f"{var} = {self._read(path)}")
        self._vars[path] = var
        return var

    def _dict_of(self, path: ObjPath) -> str:
        """A local variable holding ``__dict__`` of the object at ``path``."""
        key = ObjPath(("__dict__", *path.root), path.steps)
        if key not in self._vars:
            obj = self._path(path)
            var = self._new()
            self.src.emit(f"{var} = {obj}.__dict__")
            self._vars[key] = var
        return self._vars[key]

    def _read(self, path: ObjPath) -> str:
        """An expression reading the last step of ``path`` from its parent."""
        kind, key = path.steps[-1]
        parent = ObjPath(path.root, path.steps[:-1])
        if kind == "attr":
            return f"{self._dict_of(parent)}[{_lit(key, self.src)}]"
        obj = self._path(parent)
        if kind in _ACCESS:
            return f"{obj}.{_ACCESS[kind]}[{_lit(key, self.src)}]"
        if kind == "item":
            return f"{obj}[{_lit(key, self.src)}]"
        return _attr(obj, key, self.src)

    def _conditions(self, g: Guard, batch: _Batch) -> list[str]:
        """Failing conditions of ``g``. Reads of the same object's ``__dict__`` go into
        ``batch``: compared in one C-level ``itemgetter`` + tuple comparison per object."""
        src = self.src
        steps = g.path.steps
        parent = ObjPath(g.path.root, steps[:-1])
        in_dict = bool(steps) and steps[-1][0] == "attr"
        if g.kind == "absent":
            name = steps[-1][1]
            cls = self._classes.get(parent)
            if g.expect == "method" or cls is None or not issubclass(cls, torch.nn.Module):
                batch.absent(self._dict_of(parent), name)
                return []
            obj = self._path(parent)
            key = _lit(name, src)
            return [f"{key} in {self._dict_of(parent)}", *(f"{key} in {obj}.{t}" for t in _ACCESS.values())]
        if g.kind == "value":
            expected = values.decode(g.expect)
            if type(expected) is float and math.isnan(expected):
                var = self._path(g.path)
                return [f"type({var}) is not float or {var} == {var}"]
            if type(expected) in (int, float):  # 2 and 2.0 compute different dtypes
                var = self._path(g.path)
                batch.value(None, var, expected)
                return [f"type({var}) is not {type(expected).__name__}"]
            if in_dict:
                batch.value(self._dict_of(parent), steps[-1][1], expected)
                return []
            read = self._path(g.path)
            if expected is None or type(expected) is bool:
                return [f"{read} is not {expected!r}"]
            batch.value(None, read, expected)
            return []
        if g.kind == "keys" and values.decode(g.expect) == [] and in_dict:
            batch.value(self._dict_of(parent), steps[-1][1], {})  # an empty dict (hooks): == {}
            return []
        read = self._read(g.path) if in_dict else self._path(g.path)
        if g.kind in ("type", "ident"):
            obj = resolve(str(g.expect))
            if g.kind == "type":
                self._classes[g.path] = obj
                return [f"type({self._path(g.path)}) is not {src.const(obj)}"]
            return [f"{read} is not {src.const(obj)}"]
        if g.kind == "len":
            n = int(g.expect)
            return [read] if n == 0 else [f"len({read}) != {n}"]
        if g.kind == "keys":
            return [f"list({read}) != {_lit(list(values.decode(g.expect)), src)}"]
        other = self._path(ObjPath.from_json(g.expect))
        return [f"{self._path(g.path)} is not {other}"]

    def _state(self) -> None:
        """One ``if`` per object: all guards on its attributes in one condition."""
        src = self.src
        groups: dict[ObjPath, list[Guard]] = {}
        for g in self.v.guards:
            owner = ObjPath(g.path.root, g.path.steps[:-1]) if g.path.steps and g.kind != "type" else g.path
            groups.setdefault(owner, []).append(g)
        for owner, guards in groups.items():
            batch = _Batch()
            conds: list[str] = []
            for g in guards:
                conds += self._conditions(g, batch)
            conds += batch.conditions(src)
            if conds:
                src.require(
                    f"{' or '.join(conds)}",
                    "state",
                    f"{owner.label()} state",
                    lambda s, args, guards=guards, owner=owner: (
                        first_problem(guards, s)
                        or f"{owner.label()} changed while the call was being checked"
                    ),
                )

    def _weights(self) -> list[str]:
        src, out = self.src, []
        for w in self.v.weights:
            first, *rest = w.paths
            var = self._path(first)
            out.append(var)
            for p in rest:
                other = self._path(p)
                src.require(
                    f"{other} is not {var}",
                    "weights",
                    f"{p.label()} tied",
                    lambda s, args, p=p, first=first: (
                        f"{p.label()} is no longer the same tensor as {first.label()} (tied when compiled)"
                    ),
                )
        return out

    def build(self) -> Check:
        src = self.src
        n = len(self.v.leaves)
        tensors = self._inputs()
        grads = " or ".join(f"{a}.requires_grad" for a in tensors)
        if grads and not self.trains:
            fail = src.fail("autograd", "autograd", lambda s, args: _AUTOGRAD)
            src.emit(f"if GE() and ({grads}): {fail}")
        self._state()
        weights = self._weights()
        if weights:
            src.emit(f"if not TG[0].check({', '.join(weights)}): return {WEIGHTS_CHANGED}")
        items = [*tensors, *weights]
        src.emit(f"return ({''.join(x + ', ' for x in items)})")
        params = ", ".join(["a_self", *(f"a{i}" for i in range(n))])
        body = "\n".join(
            ["try:", *("    " + ln for ln in src.lines), "except Exception:", f"    return {EXCEPTION}"]
        )
        code = f"def check({params}):\n" + "\n".join("    " + ln for ln in body.splitlines()) + "\n"
        return Check(self.v, code, src.consts, src.failures, len(tensors))


class _Batch:
    """Comparisons of one object's attributes, emitted as a few C-level operations."""

    def __init__(self) -> None:
        self.by_dict: dict[str, list[tuple[Any, Any]]] = {}
        self.other: list[tuple[str, Any]] = []
        self.absent_names: dict[str, list[Any]] = {}

    def value(self, dict_var: str | None, key_or_read: Any, expected: Any) -> None:
        if dict_var is None:
            self.other.append((str(key_or_read), expected))
        else:
            self.by_dict.setdefault(dict_var, []).append((key_or_read, expected))

    def absent(self, dict_var: str, name: Any) -> None:
        self.absent_names.setdefault(dict_var, []).append(name)

    def conditions(self, src: _Source) -> list[str]:
        conds = []
        for d, names in self.absent_names.items():
            if len(names) == 1:
                conds.append(f"{_lit(names[0], src)} in {d}")
            else:
                conds.append(f"not {d}.keys().isdisjoint({src.const(tuple(names))})")
        for d, items in self.by_dict.items():
            if len(items) == 1:
                ((key, expected),) = items
                conds.append(f"{d}[{_lit(key, src)}] != {src.const(expected)}")
            else:
                getter = src.const(operator.itemgetter(*(k for k, _ in items)))
                conds.append(f"{getter}({d}) != {src.const(tuple(e for _, e in items))}")
        if self.other:
            reads = "".join(f"{r}, " for r, _ in self.other)
            conds.append(f"({reads}) != {src.const(tuple(e for _, e in self.other))}")
        return conds


def _lit(value: Any, src: _Source) -> str:
    """Source text for a plain constant: a Python literal where ``repr`` gives one that
    evaluates back to an equal value of the same type (never code), else a constant slot."""
    kind = type(value)
    if value is None or kind in (bool, int, str) or (kind is float and math.isfinite(value)):
        return repr(value)
    if kind in (tuple, list) and all(type(v) in (bool, int, str, type(None)) for v in value):
        return repr(value)
    return src.const(value)


def guard_problem(g: Guard, self_obj: Any) -> str | None:
    """What is wrong with ``g`` now (None: it holds); the slow, exact form of the check."""
    label = g.path.label()
    try:
        if g.kind == "absent":
            parent = paths.resolve(ObjPath(g.path.root, g.path.steps[:-1]), self_obj)
            name = g.path.steps[-1][1]
            tables = [paths.container(parent, "attr", name)]
            tables += (
                []
                if g.expect == "method"
                else [
                    t
                    for t in (getattr(parent, "__dict__", {}).get(a) for a in _ACCESS.values())
                    if isinstance(t, dict)
                ]
            )
            return (
                f"{label} is now set on the instance (it was not when compiled)"
                if any(name in t for t in tables)
                else None
            )
        obj = paths.resolve(g.path, self_obj)
    except LookupError as exc:
        return f"{label} no longer exists ({exc})"
    if g.kind == "value":
        expected = values.decode(g.expect)
        ok = values.same(obj, expected)
        return None if ok else f"{label} is {_describe_value(obj)}, compiled for {_describe_value(expected)}"
    if g.kind in ("type", "ident"):
        try:
            want = resolve(str(g.expect))
        except LookupError as exc:
            return f"{label}: {exc}"
        if g.kind == "type":
            t = type(obj)
            return (
                None
                if t is want
                else f"{label} is a {t.__module__}.{t.__qualname__}, compiled for {g.expect}"
            )
        return None if obj is want else f"{label} was replaced (compiled for {g.expect})"
    if g.kind == "len":
        n = len(obj) if hasattr(obj, "__len__") else -1
        hooks = " (hooks are not compiled in)" if "hooks" in label else ""
        return None if n == int(g.expect) else f"{label} has {n} entries, compiled with {g.expect}{hooks}"
    if g.kind == "keys":
        keys = list(values.decode(g.expect))
        if list(obj) == keys:
            return None
        if not keys:
            hooks = " (hooks are not compiled in)" if "hooks" in label else ""
            return f"{label} has {len(obj)} entries, compiled with 0{hooks}"
        return f"{label} has keys {list(obj)}, compiled for {keys}"
    other = ObjPath.from_json(g.expect)
    try:
        same = obj is paths.resolve(other, self_obj)
    except LookupError as exc:
        return f"{other.label()} no longer exists ({exc})"
    return (
        None
        if same
        else f"{label} is no longer the same object as {other.label()} (one object when compiled)"
    )


def first_problem(guards: Iterable[Guard], self_obj: Any) -> str | None:
    """The first of ``guards`` that does not hold now, described; None when all hold."""
    return next((p for p in (guard_problem(g, self_obj) for g in guards) if p), None)


_AUTOGRAD = (
    "inputs or weights require grad and grad mode is on; artifacts are inference-only: call "
    "under torch.no_grad()/torch.inference_mode() or requires_grad_(False)"
)


class Check:
    """A compiled check; ``fast`` for every call, ``weights_changed`` when the cached weight
    metadata no longer matches (a weight was replaced or converted)."""

    def __init__(
        self, variant: Variant, code: str, consts: list[Any], failures: list[Failure], n_tensors: int
    ) -> None:
        self.variant = variant
        self.code = code
        self.failures = failures
        self.n_tensors = n_tensors
        self._tg: list[Any] = [_NeverChecked()]
        self._lock = threading.Lock()
        env: dict[str, Any] = {
            "K": consts,
            "T0": torch.Tensor,
            "T1": torch.nn.Parameter,
            "GE": torch.is_grad_enabled,
            "TG": self._tg,
        }
        exec(compile(code, f"<aot_build check of {variant.signature()[:60]}>", "exec"), env)
        self.fast: Callable[..., Any] = env["check"]
        gather_env: dict[str, Any] = dict(env, TG=[_AlwaysTrue()])
        exec(compile(code, "<aot_build weight gather>", "exec"), gather_env)
        self._gather: Callable[..., Any] = gather_env["check"]
        self.specs = [w.spec for w in variant.weights]
        #: Whether the verified weights require grad (then calls with grad mode on fall back).
        self.weights_need_grad = False

    def weights_changed(self, self_obj: Any, leaves: tuple[Any, ...]) -> Any:
        """After WEIGHTS_CHANGED: verify the current weights against the manifest; when they
        fit, remember their metadata and return the call's tensors; else a message."""
        r = self._gather(self_obj, *leaves)
        if type(r) is int:
            return r
        weights = r[self.n_tensors :]
        for w, spec, record in zip(weights, self.specs, self.variant.weights, strict=True):
            problem = weight_problem(w, spec)
            if problem:
                return f"weight {record.paths[0].label()} {problem}"
        with self._lock:
            self._tg[0] = tensor_guards(tuple(weights))
            self.weights_need_grad = any(w.requires_grad for w in weights)
        return r


class RefusingCheck:
    """Stands in for a check that could not be generated from a (damaged) manifest record:
    every call fails it, and the failure says why; the entry falls back, never crashes."""

    weights_need_grad = False

    def __init__(self, detail: str) -> None:
        self.failures = [Failure("manifest", "record", lambda *_: detail)]

    @staticmethod
    def fast(*_: Any) -> Any:
        return 0

    @staticmethod
    def weights_changed(*_: Any) -> Any:
        return 0


class _NeverChecked:
    @staticmethod
    def check(*_: Any) -> bool:
        return False


def weight_problem(t: Any, spec: TensorSpec) -> str | None:
    if type(t) not in _TENSOR_TYPES:
        return f"is a {type(t).__name__}, compiled for a tensor"
    if tuple(t.shape) != spec.shape or str(t.dtype)[6:] != spec.dtype:
        return f"is {tuple(t.shape)} {str(t.dtype)[6:]}, compiled for {spec.shape} {spec.dtype}"
    if t.device.type != spec.device:
        return f"is on {t.device}, compiled for {spec.device}"
    if t.stride() != spec.stride and not (spec.stride == _contiguous(spec.shape) and t.is_contiguous()):
        return f"has strides {t.stride()}, compiled for {spec.stride}"
    return None


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))
