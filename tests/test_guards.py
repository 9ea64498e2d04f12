"""What the build records of a function's reads (record.py), the guards it plans from them
(guards.py), and the per-call check the shim generates (load/checks.py): in process, on
tests/packages/guard_pkg, with no compiling."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
import torch
from helpers import SAMPLE_PROJECTS

from aot_build.compile.guards import plan, summary
from aot_build.compile.lifting import Lifted
from aot_build.compile.record import ABSENT, METHOD, Recorder
from aot_build.load.checks import EXCEPTION, WEIGHTS_CHANGED, CheckBuilder
from aot_build.load.shim import _explain_exception
from aot_build.manifest import Guard, InputTensor, Leaf, ObjPath, OutLeaf, Variant

ROOT = SAMPLE_PROJECTS / "guard_pkg"


def G(name: str, *steps: tuple[str, Any]) -> ObjPath:
    module, _, attr = name.rpartition(".")
    return ObjPath(("global", module, attr), steps)


@pytest.fixture
def pkg() -> Iterator[ModuleType]:
    """A fresh import of guard_pkg.state (so changes never leak between tests)."""
    for name in [m for m in sys.modules if m == "guard_pkg" or m.startswith("guard_pkg.")]:
        del sys.modules[name]
    sys.path.insert(0, str(ROOT))
    try:
        yield importlib.import_module("guard_pkg.state")
    finally:
        sys.path.remove(str(ROOT))
        for name in [m for m in sys.modules if m == "guard_pkg" or m.startswith("guard_pkg.")]:
            del sys.modules[name]


def record(pkg: ModuleType, fn_name: str) -> tuple[Recorder, Any]:
    recorder = Recorder("guard_pkg", [])
    with torch.no_grad(), recorder.watching() as rec:
        getattr(pkg, fn_name)(torch.randn(3, 4))
    return recorder, rec


def test_reads_are_recorded_by_the_path_the_function_used(pkg: ModuleType) -> None:
    _, rec = record(pkg, "reads_everything")
    reads = {p.label(): v for p, v in rec.reads.items()}
    holder = "guard_pkg.state.HOLDER"
    assert reads[holder] is pkg.HOLDER
    assert reads[f"{holder}.net"] is pkg.HOLDER.net
    assert reads[f"{holder}.net._modules['0'].weight"] is pkg.HOLDER.net[0].weight
    assert reads[f"{holder}.net._modules['1'].training"] is False  # Dropout reads it
    assert reads[f"{holder}.config.flag"] is True
    assert reads[f"{holder}.config.missing"] is ABSENT
    assert reads[f"{holder}.net.forward"] is METHOD
    assert reads["guard_pkg.state.TEMP"] == 2.0
    # `helpers.SCALE` is an attribute read on the module helpers, `SCALE` a global of state:
    # two paths to one tensor, both recorded
    assert reads["guard_pkg.helpers.SCALE"] is reads["guard_pkg.state.SCALE"]
    # NET holds the same module, but the function never named it: not a path it read
    assert not any(label.startswith("guard_pkg.state.NET") for label in reads)
    assert "guard_pkg.state.torch" not in reads  # attribute names are not globals
    assert rec.pathless == []


def test_nothing_stays_patched(pkg: ModuleType) -> None:
    record(pkg, "reads_everything")
    assert "__getattribute__" not in vars(torch.nn.Module)
    assert type(sys.modules["guard_pkg.helpers"]) is ModuleType
    assert "__getattribute__" not in vars(pkg.Config)


def _planned(pkg: ModuleType, fn_name: str) -> tuple[list[Guard], Lifted, Any]:
    recorder, rec = record(pkg, fn_name)
    lifted = Lifted()
    for path, value in rec.reads.items():
        if isinstance(value, torch.Tensor) and id(value) in recorder.known:
            lifted.add(path, value)
    ids = {id(t): i for i, t in enumerate(lifted.tensors)}
    guards, weights = plan(rec, lifted, ids, "test")
    return guards, lifted, weights


def test_plan_guards_every_kind(pkg: ModuleType) -> None:
    guards, _, weights = _planned(pkg, "reads_everything")
    kinds = {(g.path.label(), g.kind, str(g.expect)) for g in guards}
    holder = "guard_pkg.state.HOLDER"
    assert (holder, "type", "guard_pkg.state:Holder") in kinds
    assert (f"{holder}.config.flag", "value", "True") in kinds
    assert (f"{holder}.config.missing", "absent", "None") in kinds
    assert (f"{holder}.net.forward", "absent", "method") in kinds
    assert (f"{holder}.net._modules['1']", "type", "torch.nn.modules.dropout:Dropout") in kinds
    assert (f"{holder}.net._modules['1']._forward_hooks", "keys", "{'list': []}") in kinds
    assert ("guard_pkg.state.TEMP", "value", "2.0") in kinds
    assert ("guard_pkg.state.helpers", "ident", "guard_pkg.helpers:") in kinds
    scale = [w for w in weights if len(w.paths) == 2]
    assert [sorted(p.label() for p in w.paths) for w in scale] == [
        ["guard_pkg.helpers.SCALE", "guard_pkg.state.SCALE"]
    ]
    assert "weights 3 (1 read through several paths)" in summary(guards, weights)


def _variant(guards: list[Guard], weights: list[Any]) -> Variant:
    x = InputTensor("float32", "cpu", ("batch", 4), "contiguous")
    return Variant(
        inputs={"type": "tuple", "context": None, "children": [None]},
        leaves=(Leaf(tensor=x),),
        outputs=None,
        out_leaves=(OutLeaf("tensor"),),
        symbols={"batch": (2, 8)},
        weights=tuple(weights),
        guards=tuple(guards),
        labels=("x",),
    )


def _check(pkg: ModuleType, fn_name: str) -> Any:
    guards, _, weights = _planned(pkg, fn_name)
    check = CheckBuilder(_variant(guards, weights), cuda=False).build()
    x = torch.randn(3, 4)
    assert check.fast(None, x) == WEIGHTS_CHANGED  # weights' metadata not verified yet
    r = check.weights_changed(None, (x,))
    assert isinstance(r, tuple) and r[0] is x
    assert isinstance(check.fast(None, x), tuple)
    return check


def _explain(check: Any, *args: Any) -> str:
    code = check.fast(None, *args)
    assert isinstance(code, int) and code != WEIGHTS_CHANGED, code
    if code == EXCEPTION:  # a read raised (the object changed class): the slow path explains
        return f"state: {_explain_exception(check.variant, None)}"
    failure = check.failures[code]
    return f"{failure.reason}: {failure.explain(None, args)}"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda m: setattr(m, "TEMP", 3.0),
            "state: guard_pkg.state.TEMP is float 3.0, compiled for float 2.0",
        ),
        (lambda m: setattr(m, "TEMP", 2), "guard_pkg.state.TEMP is int 2, compiled for float 2.0"),
        (
            lambda m: setattr(m.HOLDER.config, "flag", False),
            "HOLDER.config.flag is bool False, compiled for bool True",
        ),
        (
            lambda m: setattr(m.HOLDER.config, "missing", 1),
            "HOLDER.config.missing is now set on the instance",
        ),
        (
            lambda m: m.HOLDER.net.train(),
            "HOLDER.net._modules['1'].training is bool True, compiled for bool False",
        ),
        (lambda m: m.HOLDER.net.__setitem__(1, torch.nn.Identity()), "is a torch.nn.modules.linear.Identity"),
        (lambda m: m.HOLDER.net.append(torch.nn.ReLU()), "HOLDER.net._modules has keys ['0', '1', '2']"),
        (lambda m: m.HOLDER.net[0].register_forward_hook(lambda *a: None), "_forward_hooks has 1 entries"),
        (
            lambda m: setattr(m.HOLDER.net, "forward", lambda x: x),
            "HOLDER.net.forward is now set on the instance",
        ),
        (lambda m: setattr(m, "helpers", m), "guard_pkg.state.helpers was replaced"),
        (lambda m: setattr(m, "HOLDER", object()), "guard_pkg.state.HOLDER is a builtins.object"),
    ],
)
def test_changed_state_fails_the_check_naming_it(pkg: ModuleType, change: Any, expected: str) -> None:
    check = _check(pkg, "reads_everything")
    change(pkg)
    assert expected in _explain(check, torch.randn(3, 4))


def test_reassigned_weights_are_read_by_path(pkg: ModuleType) -> None:
    check = _check(pkg, "reads_everything")
    x = torch.randn(3, 4)
    new = torch.nn.Linear(4, 4)
    pkg.HOLDER.net[0] = new  # same class, same shapes: the new weights are passed
    r = check.fast(None, x)
    assert isinstance(r, tuple) and any(t is new.weight for t in r)
    pkg.HOLDER.net[0] = torch.nn.Linear(4, 4).double()
    assert check.fast(None, x) == WEIGHTS_CHANGED
    assert "float64" in check.weights_changed(None, (x,))
    sys.modules["guard_pkg.helpers"].SCALE = torch.ones(4)  # one of two paths of one weight
    pkg.HOLDER.net[0] = new
    assert "guard_pkg.state.SCALE is no longer the same tensor as guard_pkg.helpers.SCALE" in _explain(
        check, x
    )


def test_tied_weights_checked_by_every_path(pkg: ModuleType) -> None:
    check = _check(pkg, "reads_tied")
    x = torch.randn(3, 4)
    pkg.TIED[1].weight = torch.nn.Parameter(torch.randn(4, 4))
    assert "TIED._modules['1'].weight is no longer the same tensor as" in _explain(check, x)


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (torch.randn(9, 4), "x dimension 0 (batch) is 9, compiled for batch 2..8"),
        (torch.randn(1, 4), "x dimension 0 (batch) is 1, compiled for batch 2..8"),
        (torch.randn(3, 5), "x dimension 1 is 5, compiled for 4"),
        (torch.randn(3, 4, 1), "x has 3 dimensions, compiled for 2"),
        (torch.randn(3, 4).double(), "x is float64, compiled for float32"),
        (torch.randn(4, 3).t(), "x is not contiguous"),
        ([1.0], "x is list, compiled for a torch.Tensor"),
        (torch.randn(3, 4, requires_grad=True), "autograd: inputs or weights require grad"),
    ],
)
def test_arguments_are_checked(pkg: ModuleType, x: Any, expected: str) -> None:
    check = _check(pkg, "reads_tied")
    assert expected in _explain(check, x)


def test_manifest_text_never_becomes_code(pkg: ModuleType) -> None:
    """Names and values from a (possibly hostile) manifest are literals or constants."""
    hostile = "x'] or __import__('os').system('touch /tmp/aot-pwned') or d['"
    guards = [
        Guard(G("guard_pkg.state.TEMP"), "value", hostile),
        Guard(G("guard_pkg.state.HOLDER", ("attr", hostile)), "absent"),
        Guard(G("guard_pkg.state.HOLDER", ("getattr", hostile)), "value", 1),
    ]
    check = CheckBuilder(_variant(guards, []), cuda=False).build()
    assert hostile in check.code or repr(hostile) in check.code
    r = check.fast(None, torch.randn(3, 4))
    assert isinstance(r, int)
    assert r == EXCEPTION or r >= 0
    import os

    assert not os.path.exists("/tmp/aot-pwned")
