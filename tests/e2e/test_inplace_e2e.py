"""State updated in place, end to end: tests/packages/inplace_pkg built with a real
``python -m build`` (one target), installed into a new environment, run with no compiler on
PATH and an empty Inductor cache. In strict mode (``AOT_BUILD_STRICT=1``: a fallback is an
error) every call runs compiled, and step after step its output, every buffer and parameter
of the package and every argument equal eager's, the same tensor objects updated in place;
for the training entry (BatchNorm in train mode, ``backward=True``) the gradients too.
Then (not strict) an ``out=`` call whose output aliases an input falls back with a warning
naming both, with eager's result."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import Venv, run_script, sample_dists, wheel_manifest

COMMON = r'''
import json, sys, warnings
import torch
import inplace_pkg as P
from aot_build.errors import FallbackWarning

ENTRIES = [P.bn_forward, P.bn_loss, P.decode, P.ema_update, P.sgd_step, P.add_out, P.normalize_]
CODES = {e.__wrapped__.__code__ for e in ENTRIES}
ran = []


def profile(frame, event, arg):
    if event == "call" and frame.f_code in CODES:
        ran.append(frame.f_code.co_name)


def state():
    """Every buffer and parameter of the package, by name."""
    out = {"K_CACHE": P.K_CACHE, "V_CACHE": P.V_CACHE}
    for name in ("NET", "BN_NET", "PROJ", "MODEL", "EMA", "REGRESSOR"):
        for k, v in getattr(P, name).state_dict(keep_vars=True).items():
            out[f"{name}.{k}"] = v
    return out


def close(a, b):
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5))
    return a == b


def copies(args):
    # the tensor arguments cloned; one tensor passed twice stays one tensor
    memo = {}
    return [memo.setdefault(id(a), a.clone()) if isinstance(a, torch.Tensor) else a for a in args]


def step(entry, *args):
    """The entry's compiled call and eager on the same state and copies of the arguments:
    whether Python ran, the warnings, and what differs (output, state, arguments, identity)."""
    tensors = state()
    before = {k: v.detach().clone() for k, v in tensors.items()}
    args_c, args_e = copies(args), copies(args)
    del ran[:]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.setprofile(profile)
        try:
            out = entry(*args_c)
        finally:
            sys.setprofile(None)
    python = bool(ran)
    got = {k: v.detach().clone() for k, v in tensors.items()}
    with torch.no_grad():
        for k, v in tensors.items():
            v.copy_(before[k])
    want = entry.__wrapped__(*args_e)
    after = state()
    differs = [k for k in tensors if after[k] is not tensors[k] or not close(got[k], after[k].detach())]
    differs += [f"argument {i}" for i, (a, b) in enumerate(zip(args_c, args_e)) if not close(a, b)]
    if not close(out, want):
        differs.append("output")
    returned = [i for i, a in enumerate(args_c) if out is a]
    return {
        "python": python,
        "warnings": [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)],
        "differs": differs,
        "returns_argument": returned,
    }
'''

STRICT = (
    COMMON
    + r"""
def train_step(x, y):
    # bn_loss(x, y).backward() compiled and eager from the same state: what differs (loss,
    # gradients of x and of every parameter, buffers), and the compiled loss's grad_fn
    tensors = state()
    params = dict(P.BN_NET.named_parameters())
    before = {k: v.detach().clone() for k, v in tensors.items()}
    xc, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    del ran[:]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.setprofile(profile)
        try:
            loss = P.bn_loss(xc, y)
        finally:
            sys.setprofile(None)
    grad_fn = type(loss.grad_fn).__name__
    loss.backward()
    got = {k: v.detach().clone() for k, v in tensors.items()}
    got_grads = {k: p.grad.clone() for k, p in params.items()}
    with torch.no_grad():
        for k, v in tensors.items():
            v.copy_(before[k])
    for p in params.values():
        p.grad = None
    ref = P.bn_loss.__wrapped__(xe, y)
    ref.backward()
    after = state()
    differs = [k for k in tensors if after[k] is not tensors[k] or not close(got[k], after[k].detach())]
    differs += [f"grad {k}" for k, p in params.items() if not close(got_grads[k], p.grad)]
    differs += [] if close(xc.grad, xe.grad) else ["grad x"]
    differs += [] if close(loss.detach(), ref.detach()) else ["output"]
    for p in params.values():
        p.grad = None
    return {
        "python": bool(ran),
        "warnings": [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)],
        "differs": differs,
        "grad_fn": grad_fn,
        "num_batches_tracked": int(P.BN_NET[1].num_batches_tracked),
    }


torch.manual_seed(11)
facts = {"bn_loss": [train_step(torch.randn(6, 8), torch.randn(6, 1)) for _ in range(4)]}
with torch.no_grad():
    facts["bn_forward"] = [step(P.bn_forward, torch.randn(4, 8)) for _ in range(4)]
    facts["decode"] = [step(P.decode, torch.randn(1, 8), torch.tensor([pos])) for pos in range(6)]
    facts["ema_update"] = [step(P.ema_update, 0.9) for _ in range(3)]
    facts["sgd_step"] = [step(P.sgd_step, torch.randn(8, 8), torch.randn(8, 1), 0.05) for _ in range(5)]
    facts["add_out"] = [
        step(P.add_out, torch.randn(4, 8), torch.randn(4, 8), torch.empty(4, 8)) for _ in range(2)
    ]
    facts["normalize_"] = [step(P.normalize_, torch.randn(4, 8)) for _ in range(2)]
print("RESULT: " + json.dumps(facts))
"""
)

ALIASING = (
    COMMON
    + r"""
torch.manual_seed(12)
with torch.no_grad():
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    facts = step(P.add_out, a, b, a)  # out is a: eager reads a while writing it
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    again = step(P.add_out, a, b, torch.empty(4, 8))
print("RESULT: " + json.dumps({"aliased": facts, "again": again}))
"""
)


@pytest.fixture(scope="module")
def inplace_installed(
    venv_factory: Callable[..., Venv],
    e2e_dir: Path,
    inductor_cache: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    dists = sample_dists("inplace_pkg", e2e_dir, inductor_cache)
    venv = venv_factory("inplace-venv", dists.wheel)
    manifest = wheel_manifest(dists.wheel, "inplace_pkg", tmp_path_factory.mktemp("inplace-manifest"))
    return {"venv": venv, "manifest": manifest}


def test_the_manifest_records_what_each_entry_writes(inplace_installed: dict[str, Any]) -> None:
    manifest = inplace_installed["manifest"]
    records = {key: manifest.entry(key) for key in manifest.entries}
    written = {key: [v.mutated for v in e.variants] for key, e in records.items()}
    # argument tensors come first, then the weights, in the order the library takes them
    assert written["inplace_pkg:add_out"] == [(2,)]
    assert written["inplace_pkg:normalize_"] == [(0,)]
    for key in ("bn_forward", "bn_loss", "decode", "ema_update", "sgd_step"):
        (mutated,) = written[f"inplace_pkg:{key}"]
        assert mutated, key
    (bn,) = records["inplace_pkg:bn_forward"].variants
    assert len(bn.mutated) == 3  # running_mean, running_var, num_batches_tracked
    (bn_loss,) = records["inplace_pkg:bn_loss"].variants
    assert len(bn_loss.mutated) == 3
    assert bn_loss.training is not None and bn_loss.training.mutated  # copied back by the runtime
    assert {a.role for a in bn_loss.artifacts} == {"inference", "forward", "backward"}
    (sgd,) = records["inplace_pkg:sgd_step"].variants
    assert len(sgd.mutated) == 4  # both layers' weight and bias
    assert {a.target for e in records.values() for v in e.variants for a in v.artifacts} == {"cpu-baseline"}


@pytest.fixture(scope="module")
def strict_run(inplace_installed: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_script(
        inplace_installed["venv"], STRICT, tmp_path_factory.mktemp("inplace"), AOT_BUILD_STRICT="1"
    )


@pytest.mark.parametrize(
    "entry", ["bn_forward", "bn_loss", "decode", "ema_update", "sgd_step", "add_out", "normalize_"]
)
def test_every_step_runs_compiled_and_equals_eager(strict_run: dict[str, Any], entry: str) -> None:
    for i, facts in enumerate(strict_run[entry]):
        assert facts["python"] is False, (entry, i, facts)
        assert facts["warnings"] == [] and facts["differs"] == [], (entry, i, facts)


def test_batchnorm_training_entry_runs_compiled_backward(strict_run: dict[str, Any]) -> None:
    """Gradients through the compiled forward and backward libraries; running statistics
    and num_batches_tracked copied back after each forward (1, 2, 3, 4 as in eager)."""
    steps = strict_run["bn_loss"]
    assert [f["grad_fn"] for f in steps] == ["_JoinedBackward"] * 4
    assert [f["num_batches_tracked"] for f in steps] == [1, 2, 3, 4]


def test_functions_return_the_callers_tensor(strict_run: dict[str, Any]) -> None:
    assert all(f["returns_argument"] == [2] for f in strict_run["add_out"])
    assert all(f["returns_argument"] == [0] for f in strict_run["normalize_"])


def test_aliased_out_falls_back_with_eagers_result(
    inplace_installed: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    facts = run_script(inplace_installed["venv"], ALIASING, tmp_path_factory.mktemp("inplace-alias"))
    aliased = facts["aliased"]
    assert aliased["python"] is True and aliased["differs"] == [], aliased
    (warning,) = aliased["warnings"]
    assert warning.startswith("aot_build: inplace_pkg:add_out runs as plain Python: "), warning
    assert "argument out is updated in place and shares memory with argument a" in warning
    again = facts["again"]
    assert again["python"] is False and again["warnings"] == [] and again["differs"] == [], again
