"""Training entries (``backward=True``) and the ``dynamo`` backend end to end:
tests/packages/train_pkg built with a real isolated ``python -m build``, installed into the
fresh environment, called from a neutral folder with an empty Inductor cache; values and
gradients (inputs and parameters) compared with eager. ``aoti`` entries run with no compiler
on PATH; ``dynamo`` entries need one to load (and without one fall back, saying so).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import BuiltDists, Venv, run_script, sample_dists, wheel_manifest

CHECK = r'''
import json, sys, warnings
import torch
import train_pkg as P

ran = []
codes = {P.loss.__wrapped__.__code__, P.Block.forward.__wrapped__.__code__}
def profile(frame, event, arg):
    if event == "call" and frame.f_code in codes:
        ran.append(frame.f_code.co_name)

def compiled(fn, *args):
    sys.setprofile(profile)
    try:
        return fn(*args)
    finally:
        sys.setprofile(None)

def close(a, b):
    return bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5))

def grads(params, *inputs):
    return [t.grad.clone() for t in (*inputs, *params)]

def step(fn, eager, params, make):
    """compiled and eager value and gradients for the same inputs"""
    inputs = make()
    out = compiled(fn, *inputs)
    out.sum().backward()
    got = [out.detach(), *grads(params, *[t for t in inputs if t.requires_grad])]
    grad_fn = type(out.grad_fn).__name__
    for t in (*inputs, *params):
        t.grad = None
    ref = eager(*inputs)
    ref.sum().backward()
    want = [ref.detach(), *grads(params, *[t for t in inputs if t.requires_grad])]
    for t in (*inputs, *params):
        t.grad = None
    return {"equal": all(close(a, b) for a, b in zip(got, want, strict=True)), "grad_fn": grad_fn}

torch.manual_seed(7)
facts = {}
params = list(P.ENCODER.parameters())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for batch in (3, 40):
        make = lambda: (torch.randn(batch, 16, requires_grad=True), torch.randint(0, 5, (batch,)))
        facts[f"loss-{batch}"] = step(P.loss, P.loss.__wrapped__, params, make)
    # weights only (the input does not require grad), after loading new weights
    with torch.no_grad():
        for p in params:
            p.copy_(torch.randn_like(p))
    make = lambda: (torch.randn(6, 16), torch.randint(0, 5, (6,)))
    facts["loss-weights-only"] = step(P.loss, P.loss.__wrapped__, params, make)
    block = P.Block()
    make = lambda: (torch.randn(4, 10, 16, requires_grad=True),)
    eager = lambda x: P.Block.forward.__wrapped__(block, x)
    facts["block"] = step(block, eager, list(block.parameters()), make)
    with torch.no_grad():  # the inference artifact: no saved tensors, no graph
        x, t = torch.randn(5, 16), torch.randint(0, 5, (5,))
        out = compiled(P.loss, x, t)
        facts["no-grad"] = {"equal": close(out, P.loss.__wrapped__(x, t)), "requires_grad": out.requires_grad}
    x = torch.randn(4, 16, requires_grad=True)
    y = compiled(P.loss, x, torch.randint(0, 5, (4,)))
    try:
        torch.autograd.grad(torch.autograd.grad(y, x, create_graph=True)[0].sum(), x)
        facts["double-backward"] = "no error"
    except RuntimeError as exc:
        facts["double-backward"] = str(exc)
facts["ran_python"] = ran
facts["inductor_imported"] = "torch._inductor" in sys.modules
facts["warnings"] = [str(w.message) for w in caught if w.category.__name__ == "FallbackWarning"]
print("RESULT: " + json.dumps(facts))
'''


@pytest.fixture(scope="module")
def train_dists(e2e_dir: Path, inductor_cache: Path) -> BuiltDists:
    return sample_dists("train_pkg", e2e_dir, inductor_cache)


@pytest.fixture(scope="module")
def train_venv(venv_factory: Callable[..., Venv], train_dists: BuiltDists) -> Venv:
    return venv_factory("train-venv", train_dists.wheel)


DYNAMO = r"""
import json, sys, warnings
import torch
import train_pkg as P

ran = []
codes = {P.embed.__wrapped__.__code__, P.dynamo_loss.__wrapped__.__code__}
def profile(frame, event, arg):
    if event == "call" and frame.f_code in codes:
        ran.append(frame.f_code.co_name)

torch.manual_seed(3)
facts = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for rows in (5, 50):
        x = torch.randn(rows, 16)
        sys.setprofile(profile)
        with torch.no_grad():
            y = P.embed(x)
        sys.setprofile(None)
        facts[f"embed-{rows}"] = bool(torch.allclose(y, P.embed.__wrapped__(x), rtol=1e-5, atol=1e-6))
    x, t = torch.randn(9, 16), torch.randint(0, 5, (9,))
    sys.setprofile(profile)
    loss = P.dynamo_loss(x, t)
    sys.setprofile(None)
    loss.backward()
    got = [p.grad.clone() for p in P.ENCODER.parameters()]
    P.ENCODER.zero_grad()
    P.dynamo_loss.__wrapped__(x, t).backward()
    facts["loss-grads"] = all(
        torch.allclose(a, p.grad, rtol=1e-4, atol=1e-5) for a, p in zip(got, P.ENCODER.parameters())
    )
facts["ran_python"] = sorted(set(ran))
facts["warnings"] = [str(w.message) for w in caught if w.category.__name__ == "FallbackWarning"]
print("RESULT: " + json.dumps(facts))
"""


def test_wheel_ships_forward_and_backward_per_variant(train_dists: BuiltDists, tmp_path: Path) -> None:
    manifest = wheel_manifest(train_dists.wheel, "train_pkg", tmp_path)
    for key in ("train_pkg:loss", "train_pkg:Block.forward"):
        (variant,) = manifest.entries[key].variants
        roles = sorted((a.role, a.backend) for a in variant.artifacts)
        assert roles == [("backward", "aoti"), ("forward", "aoti"), ("inference", "aoti")], key
        assert variant.training is not None and variant.training.num_saved > 0
    # the dynamo backend: one artifact for no-grad calls, one (autograd inside) for training
    (variant,) = manifest.entries["train_pkg:dynamo_loss"].variants
    roles = sorted((a.role, a.backend) for a in variant.artifacts)
    assert roles == [("grad", "dynamo"), ("inference", "dynamo")]
    assert variant.training is None
    assert "train_pkg:loss backward [cpu-baseline] compiled" in train_dists.log


def test_gradients_equal_eager_without_a_compiler(train_venv: Venv, tmp_path: Path) -> None:
    facts = run_script(train_venv, CHECK, tmp_path, AOT_BUILD_STRICT="1")
    for case in ("loss-3", "loss-40", "loss-weights-only", "block"):
        assert facts[case] == {"equal": True, "grad_fn": "_JoinedBackward"}, (case, facts)
    assert facts["no-grad"] == {"equal": True, "requires_grad": False}
    assert "differentiable once" in facts["double-backward"] or "once" in facts["double-backward"], facts
    assert facts["ran_python"] == [] and facts["warnings"] == []
    assert facts["inductor_imported"] is False


def test_dynamo_rule_runs_with_a_compiler(train_venv: Venv, tmp_path: Path) -> None:
    facts = run_script(train_venv, DYNAMO, tmp_path, AOT_BUILD_STRICT="1", PATH=f"{train_venv.bin}:/usr/bin")
    assert facts["embed-5"] and facts["embed-50"] and facts["loss-grads"], facts
    assert facts["ran_python"] == [] and facts["warnings"] == []


def test_dynamo_rule_without_a_compiler_falls_back_naming_it(train_venv: Venv, tmp_path: Path) -> None:
    facts = run_script(train_venv, DYNAMO, tmp_path)
    assert facts["embed-5"] and facts["embed-50"] and facts["loss-grads"], facts
    assert facts["ran_python"] == ["dynamo_loss", "embed"]
    assert len(facts["warnings"]) == 2, facts["warnings"]  # one per entry, not one per call
    for msg in facts["warnings"]:
        assert "(backend dynamo): DynamoLoadError" in msg, msg
        assert "needs a C++ compiler on PATH or CXX" in msg, msg
