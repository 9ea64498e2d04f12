"""Generate one variant's per-call argument check as a single straight-line Python function.

The function takes ``self`` (or None) and the flattened arguments, and either returns the
tuple of the argument tensors to pass to the library or the number of the first check that
failed: type, dtype, rank, every dimension (fixed sizes, symbol ranges, equal sizes for a
shared symbol, derived sizes), layout, device, plain values, and (inference artifacts) that
no argument requires grad while grad mode is on. Package state (guards) and weights are
checked by the variant's bound guard tree (:mod:`aot_build.guards.bound`).

Nothing from the manifest is pasted into the source as code: names and values are passed
as constants (``K[i]``). Any exception inside is a failed check too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from .. import values
from ..manifest import UNBOUNDED, InputTensor, Variant
from ..records import record

_TENSOR_TYPES = (torch.Tensor, torch.nn.Parameter)
_ACCESS = {"param": "_parameters", "buffer": "_buffers", "child": "_modules"}

#: Returned by a check when an exception (not a failed comparison) stopped it.
EXCEPTION = -2


def _dtype(name: str) -> torch.dtype:
    d = getattr(torch, name, None)
    if not isinstance(d, torch.dtype):
        raise ValueError(f"unknown dtype {name!r} in manifest")
    return d


@record
class Failure:
    """What a failed check means: the fallback reason, a stable key for warning once,
    and a function that describes the failure for this call."""

    reason: str
    key: str
    explain: Callable[..., str]


class _CheckWriter:
    """The generated check function being written: its lines, the constants they read
    (``K[i]``) and the failures they return (by index)."""

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


def _describe_value(v: Any) -> str:
    return f"{type(v).__name__} {values.describe(v)}"


class CheckBuilder:
    """Builds the check of one variant; see the module docstring.

    Args:
        variant: the manifest record.
        cuda: whether the variant has CUDA artifacts.
        size_one_symbols: symbols a size-one variant of the same input set serves at 1.
        trains: the variant has training artifacts: tensors requiring grad are its to serve.
        mutated: the tensors the artifact writes in place (indices among the argument tensors,
            then the weights): each one requiring grad in grad mode fails a check of its own.
    """

    def __init__(
        self,
        variant: Variant,
        cuda: bool,
        size_one_symbols: frozenset[str] = frozenset(),
        trains: bool = False,
        mutated: tuple[int, ...] = (),
    ) -> None:
        self.v = variant
        self.cuda = cuda
        self.trains = trains
        self.mutated = mutated
        self.size_one_symbols = size_one_symbols
        self.src = _CheckWriter()

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
                elif type(expected) is float and expected == 0.0:  # -0.0 is not 0.0: x / a differs
                    sign = src.const(math.copysign)
                    want = math.copysign(1.0, expected)
                    src.emit(f"if type({a}) is not float or {a} != 0.0 or {sign}(1.0, {a}) != {want}: {fail}")
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
            " (and 1, by its own artifact)" if sym in self.size_one_symbols else ""
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

    def build(self) -> Check:
        src = self.src
        n = len(self.v.leaves)
        tensors = self._inputs()
        for k in self.mutated:
            if k >= len(tensors):  # a weight: checked with the weights
                continue
            i = int(tensors[k][1:])
            what = f"argument {self.v.label(i)}"
            src.require(
                f"GE() and {tensors[k]}.requires_grad",
                "autograd",
                f"{what} requires grad",
                lambda s, args, what=what: (
                    f"{what} is updated in place and requires grad while grad mode is on; the "
                    "library does not record the update for autograd. Call under torch.no_grad()"
                ),
            )
        grads = " or ".join(f"{a}.requires_grad" for a in tensors)
        if grads and not self.trains:
            fail = src.fail("autograd", "autograd", lambda s, args: _AUTOGRAD)
            src.emit(f"if GE() and ({grads}): {fail}")
        src.emit(f"return ({''.join(x + ', ' for x in tensors)})")
        params = ", ".join(["a_self", *(f"a{i}" for i in range(n))])
        body = "\n".join(
            ["try:", *("    " + ln for ln in src.lines), "except Exception:", f"    return {EXCEPTION}"]
        )
        code = f"def check({params}):\n" + "\n".join("    " + ln for ln in body.splitlines()) + "\n"
        return Check(self.v, code, src.consts, src.failures, len(tensors))


def _lit(value: Any, src: _CheckWriter) -> str:
    """Source text for a plain constant: a Python literal where ``repr`` gives one that
    evaluates back to an equal value of the same type (never code), else a constant slot."""
    kind = type(value)
    if value is None or kind in (bool, int, str) or (kind is float and math.isfinite(value)):
        return repr(value)
    if kind in (tuple, list) and all(type(v) in (bool, int, str, type(None)) for v in value):
        return repr(value)
    return src.const(value)


_AUTOGRAD = (
    "inputs or weights require grad and grad mode is on; artifacts are inference-only: call "
    "under torch.no_grad()/torch.inference_mode() or requires_grad_(False)"
)


class Check:
    """A compiled argument check: ``fast(self, *leaves)`` on every call."""

    def __init__(
        self, variant: Variant, code: str, consts: list[Any], failures: list[Failure], n_tensors: int
    ) -> None:
        self.variant = variant
        self.code = code
        self.failures = failures
        self.n_tensors = n_tensors
        env: dict[str, Any] = {
            "K": consts,
            "T0": torch.Tensor,
            "T1": torch.nn.Parameter,
            "GE": torch.is_grad_enabled,
        }
        exec(compile(code, f"<aot_build check of {variant.signature()[:60]}>", "exec"), env)
        self.fast: Callable[..., Any] = env["check"]


class RefusingCheck:
    """Stands in for a check that could not be generated from a (damaged) manifest record:
    every call fails it, and the failure says why; the entry falls back, never crashes."""

    def __init__(self, detail: str) -> None:
        self.failures = [Failure("manifest", "record", lambda *_: detail)]

    @staticmethod
    def fast(*_: Any) -> Any:
        return 0
