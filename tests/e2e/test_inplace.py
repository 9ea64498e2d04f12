"""State updated in place: an entry that writes a weight and an argument, compiled once in this
module (no wheel), and the shim's checks around such writes (aliasing, grad mode, inference
tensors, layouts, version counters).

The package is written here and compiled by ``python -m aot_build.compile`` (the build's child
process), as ``conftest.compiled`` does for shim_pkg; every test imports a fresh copy.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from helpers import compile_module_package, imported_fresh, run_traced

from aot_build.compile.joint import export_joint
from aot_build.constants import ARTIFACT_DIR, MANIFEST_NAME
from aot_build.errors import FallbackWarning
from aot_build.load.autograd import training_call
from aot_build.load.shim import _overlapping
from aot_build.manifest import Manifest

PKG = "inplace_unit_pkg"
KEY = f"{PKG}:update"

SOURCE = '''
import torch

from aot_build import aot_entry

#: A running sum the entry adds every call's x to (a weight updated in place).
ACC = torch.zeros(4)


@aot_entry(example_inputs=lambda: (torch.randn(4), torch.empty(4)))
def update(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """ACC += x; out = ACC * x (written into out, which is returned)."""
    ACC.add_(x)
    torch.mul(ACC, x, out=out)
    return out
'''


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, inductor_cache: Path) -> Path:
    build_lib, proc = compile_module_package(
        tmp_path_factory.mktemp("inplace-compile"), PKG, SOURCE, inductor_cache
    )
    assert f"note: {KEY} updates in place: argument out, weight {PKG}.ACC" in proc.stdout
    return build_lib


@pytest.fixture
def pkg(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    with imported_fresh(PKG, root, monkeypatch) as module:
        yield module


def call(pkg: ModuleType, *args: Any) -> tuple[Any, bool, list[str]]:
    """(result, whether Python ran, fallback warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, ran = run_traced(pkg.update, pkg.update.__wrapped__.__code__, *args)
    assert all(issubclass(w.category, FallbackWarning) for w in caught), [str(w.message) for w in caught]
    return out, ran, [str(w.message) for w in caught]


def eager(pkg: ModuleType, x: torch.Tensor, out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What the Python function gives from ACC as it is now: (out, ACC), ACC left unchanged."""
    acc = pkg.ACC.clone()
    want = torch.empty_like(out)
    torch.mul(acc + x, x, out=want)
    return want, acc + x


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_manifest_records_the_written_tensors(root: Path) -> None:
    manifest = Manifest.read(root / PKG / ARTIFACT_DIR / MANIFEST_NAME)
    record = manifest.entry(KEY)
    assert record is not None
    (variant,) = record.variants
    # the library takes x, out, then the weight ACC: it writes out and ACC
    assert variant.mutated == (1, 2)


def test_compiled_call_writes_the_callers_tensors(pkg: ModuleType) -> None:
    acc = pkg.ACC
    for step in range(3):  # the weight's new value is never a reason to fall back
        x, out = torch.randn(4), torch.zeros(4)
        want_out, want_acc = eager(pkg, x, out)
        versions = (acc._version, out._version)
        got, ran, warned = call(pkg, x, out)
        assert (ran, warned) == (False, []), (step, warned)
        assert got is out and pkg.ACC is acc  # same tensor objects, updated
        close(out, want_out)
        close(acc, want_acc)
        # autograd sees the writes as eager's in-place ops
        assert acc._version > versions[0] and out._version > versions[1]


def test_contiguous_view_is_written_through(pkg: ModuleType) -> None:
    base = torch.zeros(3, 4)
    x = torch.randn(4)
    want, _ = eager(pkg, x, base[1])
    _, ran, warned = call(pkg, x, base[1])
    assert (ran, warned) == (False, [])
    close(base[1], want)
    assert base[0].eq(0).all() and base[2].eq(0).all()


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        pytest.param(
            lambda pkg: ((x := torch.randn(4)), x),
            "argument out is updated in place and shares memory with argument x",
            id="argument-is-argument",
        ),
        pytest.param(
            lambda pkg: (torch.randn(4), pkg.ACC),
            f"argument out is updated in place and shares memory with weight {PKG}.ACC",
            id="argument-is-weight",
        ),
        pytest.param(
            lambda pkg: (pkg.ACC, torch.zeros(4)),
            f"weight {PKG}.ACC is updated in place and shares memory with argument x",
            id="weight-is-argument",
        ),
    ],
)
def test_aliasing_falls_back_naming_it(
    pkg: ModuleType, make: Callable[[ModuleType], tuple[torch.Tensor, torch.Tensor]], fragment: str
) -> None:
    with torch.no_grad():
        pkg.ACC.copy_(torch.randn(4))
    acc0 = pkg.ACC.clone()
    torch.manual_seed(3)
    got, ran, warned = call(pkg, *make(pkg))
    got, got_acc = got.clone(), pkg.ACC.clone()
    assert ran and len(warned) == 1 and fragment in warned[0], warned
    with torch.no_grad():
        pkg.ACC.copy_(acc0)
    torch.manual_seed(3)  # the same tensors, sharing memory the same way
    want = pkg.update.__wrapped__(*make(pkg))
    close(got, want)
    close(got_acc, pkg.ACC)


def test_overlapping_views_fall_back_to_eagers_error(pkg: ModuleType) -> None:
    b = torch.randn(5)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(RuntimeError, match="single memory"):
        warnings.simplefilter("always")
        pkg.update(b[:4], b[1:])  # eager refuses to write an input it partly overlaps
    (w,) = caught
    assert "argument out is updated in place and shares memory with argument x" in str(w.message)


def test_written_argument_requiring_grad(pkg: ModuleType) -> None:
    x = torch.randn(4)
    out = torch.zeros(4, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(RuntimeError, match="requires grad"):
        warnings.simplefilter("always")
        pkg.update(x, out)  # eager refuses this write in grad mode; so does the fallback
    (w,) = caught
    assert "argument out is updated in place and requires grad while grad mode is on" in str(w.message)
    with torch.no_grad():  # allowed in eager: compiled
        want, _ = eager(pkg, x, out)
        got, ran, warned = call(pkg, x, out)
    assert (ran, warned) == (False, []) and got is out
    close(out.detach(), want)


def test_written_weight_requiring_grad(pkg: ModuleType) -> None:
    pkg.ACC.requires_grad_(True)
    x = torch.randn(4)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(RuntimeError, match="requires grad"):
        warnings.simplefilter("always")
        pkg.update(x, torch.zeros(4))
    (w,) = caught
    assert f"weight {PKG}.ACC is updated in place and requires grad while grad mode is on" in str(w.message)


def test_inference_tensor_outside_inference_mode(pkg: ModuleType) -> None:
    with torch.inference_mode():
        out = torch.zeros(4)
    with warnings.catch_warnings(record=True) as caught, pytest.raises(RuntimeError, match=r"[Ii]nference"):
        warnings.simplefilter("always")
        pkg.update(torch.randn(4), out)
    (w,) = caught
    assert "argument out is updated in place and is an inference tensor" in str(w.message)
    with torch.inference_mode():  # inside inference mode eager writes it: compiled
        want, _ = eager(pkg, torch.ones(4), out)
        _, ran, warned = call(pkg, torch.ones(4), out)
    assert (ran, warned) == (False, [])
    close(out, want)


def test_non_contiguous_written_argument_falls_back(pkg: ModuleType) -> None:
    out = torch.zeros(4, 2)[:, 0]
    x = torch.randn(4)
    want, _ = eager(pkg, x, out.clone())
    got, ran, warned = call(pkg, x, out)
    assert ran and len(warned) == 1 and "out is not contiguous" in warned[0]
    close(got, want)


def test_a_saved_tensor_updated_in_place_fails_backward_as_in_eager(pkg: ModuleType) -> None:
    w = torch.randn(4, requires_grad=True)
    out = torch.randn(4)
    loss = (w * out).sum()  # saves out for the gradient of w
    with torch.no_grad():
        _, ran, warned = call(pkg, torch.randn(4), out)
    assert (ran, warned) == (False, [])
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def _t(n: int) -> torch.Tensor:
    return torch.zeros(n)


def test_overlapping_finds_pairs_with_a_written_tensor() -> None:
    base = torch.zeros(10)
    a, b, c = base[:5], base[5:], base[3:7]
    assert _overlapping((a, b), frozenset({0, 1})) is None  # halves of one storage: disjoint
    assert _overlapping((a, b, c), frozenset({1})) == (1, 2)
    assert _overlapping((a, c), frozenset()) is None  # overlapping, but neither is written
    big, x, y = base, base[1:2], base[8:9]
    assert _overlapping((x, y, big), frozenset({1})) == (1, 2)  # inside a longer range
    strided = torch.zeros(4, 4)
    assert _overlapping((strided[:, 0], strided[:, 1]), frozenset({0})) == (0, 1)  # conservative
    assert _overlapping((_t(3), _t(3), torch.zeros(0)), frozenset({0, 1, 2})) is None


# ---------------------------------------------------------------- training entries (joint.py)


def _bn_train(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, *stats: torch.Tensor) -> tuple[torch.Tensor]:
    mean, var, count = stats
    count.add_(1)
    y = F.batch_norm(x, mean, var, w, b, training=True, momentum=0.1)
    return ((y * torch.arange(y.shape[1])).square().mean(),)


class _Flat(torch.nn.Module):
    def forward(self, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _bn_train(*flat)


def _bn_inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return [
        torch.randn(6, 3, generator=g),
        torch.randn(3, generator=g),
        torch.randn(3, generator=g),
        torch.randn(3, generator=g),
        torch.rand(3, generator=g) + 0.5,
        torch.tensor(4),
    ]


def test_training_split_updates_running_statistics_as_eager() -> None:
    """BatchNorm in train mode as a training entry's program: the forward returns the new
    running statistics and count first, the runtime copies them into the caller's tensors;
    values, gradients and statistics equal eager's, step after step (programs run as
    ExportedPrograms here; tests/e2e/test_inplace_e2e.py runs compiled ones)."""
    flags = [True, True, True, False, False, False]
    ep = torch.export.export(_Flat(), tuple(_bn_inputs()), strict=False)
    joint = export_joint(ep, flags)
    assert joint.record.version == 2 and joint.record.mutated == (3, 4, 5)
    fwd, bwd = joint.forward.module(), joint.backward.module()
    call = training_call(lambda flat: fwd(tuple(flat)), lambda flat: bwd(tuple(flat)), joint.record)
    got = [t.clone().requires_grad_(f) for t, f in zip(_bn_inputs(), flags, strict=True)]
    want = [t.clone().requires_grad_(f) for t, f in zip(_bn_inputs(), flags, strict=True)]
    stats = got[3:]
    for step in range(3):
        x = torch.randn(6, 3)
        got[0], want[0] = x.clone().requires_grad_(), x.clone().requires_grad_()
        (out,) = call(got)
        (ref,) = _bn_train(*want)
        out.backward()
        ref.backward()
        close(out.detach(), ref.detach())
        for a, b in zip(got, want, strict=True):
            close(a.detach(), b.detach())
            if a.requires_grad:
                assert a.grad is not None and b.grad is not None
                close(a.grad, b.grad)
                a.grad = b.grad = None
        assert all(a is b for a, b in zip(got[3:], stats, strict=True)), step  # the same, updated
    assert int(got[5]) == 4 + 3
