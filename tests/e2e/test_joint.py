"""Training entries: the joint forward/backward split (compile/joint.py) compiled with
AOTInductor, joined at run time by an autograd.Function (load/autograd.py); outputs and
gradients compared with eager. Each program is compiled once per module (two libraries,
about 20 s), shared by the tests that use it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

from aot_build.backends.aoti import compile_library
from aot_build.backends.aoti.library import open_library
from aot_build.compile.joint import export_joint
from aot_build.errors import CompileError
from aot_build.load.autograd import training_call
from aot_build.manifest import TrainingRecord
from aot_build.targets import parse_target
from aot_build.toolchain import wrapper_path

REPO_ROOT = Path(__file__).resolve().parents[2]
TOL = {"rtol": 1e-4, "atol": 1e-5}
Fn = Callable[..., tuple[torch.Tensor, ...]]


class _Flat(torch.nn.Module):
    def __init__(self, fn: Fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.fn(*flat)


@dataclass
class Artifact:
    call: Callable[[Sequence[torch.Tensor]], list[torch.Tensor]]
    record: TrainingRecord
    fwd: Path
    bwd: Path


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, inductor_cache: Path) -> Iterator[Path]:
    old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(inductor_cache)
    yield tmp_path_factory.mktemp("joint")
    if old is None:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    else:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = old


def build(
    fn: Fn, examples: Sequence[torch.Tensor], flags: Sequence[bool], workdir: Path, dynamic: Any = None
) -> Artifact:
    """What a training build does: export (weights already flat inputs), split, compile both."""
    dyn = None if dynamic is None else (tuple(dynamic),)  # one entry: the *flat varargs
    ep = torch.export.export(_Flat(fn), tuple(examples), dynamic_shapes=dyn, strict=False)
    joint = export_joint(ep, flags)
    assert TrainingRecord.from_json(json.loads(json.dumps(joint.record.to_json()))) == joint.record
    target = parse_target("cpu-baseline")
    cxx = compiler(workdir)
    fwd = compile_library(joint.forward, target, {}, workdir, strip=False, cxx=cxx)
    bwd = compile_library(joint.backward, target, {}, workdir, strip=False, cxx=cxx)
    call = training_call(open_library(fwd.path, "cpu").run, open_library(bwd.path, "cpu").run, joint.record)
    return Artifact(call, joint.record, fwd.path, bwd.path)


def compiler(workdir: Path) -> str:
    """The module's compiler wrapper, by path, as a build's workers get theirs: one path for
    every compile of the module, so they share Inductor's precompiled headers (named by a hash
    of the command line; compile_library's own wrapper, new in each call, made them anew)."""
    return wrapper_path(workdir / "cxx")  # the same script again: the same path


def leaves(tensors: Sequence[torch.Tensor], flags: Sequence[bool]) -> list[torch.Tensor]:
    return [t.detach().clone().requires_grad_(f) for t, f in zip(tensors, flags, strict=True)]


def check_grads(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor]) -> None:
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if w.grad is None:
            assert g.grad is None, f"input {i}"
        else:
            assert g.grad is not None, f"input {i}"
            torch.testing.assert_close(g.grad, w.grad, **TOL, msg=lambda m, i=i: f"grad of input {i}: {m}")


# ------------------------------------------------------------------ (a), (c): an MLP


def mlp(
    x: torch.Tensor,
    w1: torch.Tensor,
    b1: torch.Tensor,
    g: torch.Tensor,
    bt: torch.Tensor,
    w2: torch.Tensor,
    b2: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    h = F.gelu(F.layer_norm(F.linear(x, w1, b1), (w1.shape[0],), g, bt))
    return (F.linear(h, w2, b2),)


def mlp_weights() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [
        torch.randn(32, 16, generator=gen) * 0.3,
        torch.randn(32, generator=gen),
        1 + 0.1 * torch.randn(32, generator=gen),
        0.1 * torch.randn(32, generator=gen),
        torch.randn(8, 32, generator=gen) * 0.3,
        torch.randn(8, generator=gen),
    ]


@pytest.fixture(scope="module")
def mlp_art(workdir: Path) -> Artifact:
    batch = Dim("batch", min=2, max=64)
    dyn = ({0: batch},) + (None,) * 6
    return build(mlp, [torch.randn(4, 16), *mlp_weights()], [True] * 7, workdir, dyn)


def run_mlp(art: Artifact, n: int, grad_out: Callable[[torch.Tensor], torch.Tensor]) -> None:
    inputs = [torch.randn(n, 16), *mlp_weights()]
    got, want = leaves(inputs, [True] * 7), leaves(inputs, [True] * 7)
    (out,) = art.call(got)
    (ref,) = mlp(*want)
    assert out.grad_fn is not None
    torch.testing.assert_close(out, ref, **TOL)
    go = grad_out(ref)
    out.backward(go)
    ref.backward(go)
    check_grads(got, want)


def test_mlp_all_grads_random_grad_output(mlp_art: Artifact) -> None:
    """(a): x and every weight require grad; a non-scalar output, a random grad_output."""
    assert mlp_art.record.grad_inputs == tuple(range(7))
    run_mlp(mlp_art, 4, torch.randn_like)


def test_mlp_non_contiguous_grad_output(mlp_art: Artifact) -> None:
    run_mlp(mlp_art, 5, lambda ref: torch.randn(ref.shape[1], ref.shape[0]).t())


@pytest.mark.parametrize("n", [7, 33])
def test_dynamic_batch(mlp_art: Artifact, n: int) -> None:
    """(c): exported at batch 4 with Dim("batch", 2..64), run at other batch sizes."""
    run_mlp(mlp_art, n, torch.randn_like)


def test_no_grad_runs_forward_only(mlp_art: Artifact) -> None:
    inputs = [torch.randn(6, 16), *mlp_weights()]
    with torch.no_grad():
        (out,) = mlp_art.call(inputs)
    assert out.grad_fn is None
    torch.testing.assert_close(out, mlp(*inputs)[0], **TOL)


def test_double_backward_refused(mlp_art: Artifact) -> None:
    got = leaves([torch.randn(4, 16), *mlp_weights()], [True] * 7)
    (out,) = mlp_art.call(got)
    with pytest.raises(RuntimeError, match="differentiable once"):
        torch.autograd.grad(out.square().sum(), got[0], create_graph=True)


def test_run_time_needs_no_compiler(mlp_art: Artifact, tmp_path: Path) -> None:
    """A fresh process loads the two libraries and trains one step without importing Inductor."""
    (tmp_path / "meta.json").write_text(json.dumps(mlp_art.record.to_json()), encoding="utf-8")
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(REPO_ROOT)!r})
        import torch
        from aot_build.backends.aoti.library import open_library
        from aot_build.load.autograd import training_call
        from aot_build.manifest import TrainingRecord
        meta = TrainingRecord.from_json(json.load(open("meta.json")))
        call = training_call(open_library({str(mlp_art.fwd)!r}, "cpu").run,
                             open_library({str(mlp_art.bwd)!r}, "cpu").run, meta)
        x = torch.randn(9, 16, requires_grad=True)
        ws = [torch.randn(32, 16), torch.randn(32), torch.ones(32), torch.zeros(32),
              torch.randn(8, 32), torch.randn(8)]
        ws = [w.requires_grad_() for w in ws]
        (out,) = call([x, *ws])
        out.sum().backward()
        assert all(t.grad is not None and t.grad.isfinite().all() for t in [x, *ws])
        bad = sorted(m for m in sys.modules if m.startswith("torch._inductor"))
        print("INDUCTOR:", bad)
        """
    )
    (tmp_path / "probe.py").write_text(script, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "probe.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "INDUCTOR: []" in proc.stdout, proc.stdout


def affine_tanh(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (torch.tanh(x @ w + b),)


# (b) a scalar loss with integer targets and (d) gradients for the weights only are covered
# end to end through a real wheel: tests/e2e/test_training_e2e.py.


# ------------------------------------------------------------------ edge cases in one program


def edges(x: torch.Tensor, w: torch.Tensor, unused: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A loss whose input gradient needs the batch size but no saved tensor has it (a shape
    carrier), an int output, an output that is a view of a weight, a weight no output uses."""
    return ((x.mean(0) * w).sum(), x.argmax(-1), w.view(2, 4))


@pytest.fixture(scope="module")
def edges_art(workdir: Path) -> Artifact:
    batch = Dim("batch", min=2, max=64)
    examples = [torch.randn(4, 8), torch.randn(8), torch.randn(3)]
    return build(edges, examples, [True, True, True], workdir, ({0: batch}, None, None))


def test_edges(edges_art: Artifact) -> None:
    record = edges_art.record
    assert record.shape_carriers == 1
    assert record.differentiable_outputs == (True, False, True)
    assert record.absent_grads == (2,)
    inputs = [torch.randn(13, 8), torch.randn(8), torch.randn(3)]
    got, want = leaves(inputs, [True] * 3), leaves(inputs, [True] * 3)
    outs, refs = edges_art.call(got), edges(*want)
    for o, r in zip(outs, refs, strict=True):
        torch.testing.assert_close(o, r, **TOL)
    assert not outs[1].requires_grad
    # only the loss: the view output's gradient is None (zeros in the backward library)
    outs[0].backward()
    refs[0].backward()
    check_grads(got, want)
    # both float outputs, the view's gradient non-contiguous
    for t in [*got, *want]:
        t.grad = None
    outs, refs = edges_art.call(got), edges(*want)
    gv = torch.randn(4, 2).t()
    torch.autograd.backward([outs[0], outs[2]], [torch.tensor(2.0), gv])
    torch.autograd.backward([refs[0], refs[2]], [torch.tensor(2.0), gv])
    check_grads(got, want)


# ------------------------------------------------------------------ refused at build time


def test_dropout_refused() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (F.dropout(x @ w, 0.5, training=True),)

    ep = torch.export.export(_Flat(fn), (torch.randn(4, 8), torch.randn(8, 3)), strict=False)
    with pytest.raises(CompileError, match="random"):
        export_joint(ep, [False, True])


def test_in_place_write_refused() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        w.mul_(2)
        return (x @ w,)

    ep = torch.export.export(_Flat(fn), (torch.randn(4, 8), torch.randn(8, 3)), strict=False)
    with pytest.raises(CompileError, match="writes in place to an input that requires grad"):
        export_joint(ep, [False, True])


def test_no_input_requires_grad_refused() -> None:
    ep = torch.export.export(_Flat(affine_tanh), (torch.randn(2, 3), torch.randn(3, 4), torch.randn(4)))
    with pytest.raises(CompileError, match="no input requires grad"):
        export_joint(ep, [False, False, False])


def attention(x: torch.Tensor, wq: torch.Tensor, wo: torch.Tensor) -> tuple[torch.Tensor, ...]:
    b, t, c = x.shape
    q = (x @ wq).view(b, t, 4, c // 4).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(b, t, c)
    return ((y @ wo).square().mean(),)


def test_attention_two_dynamic_dims_split_keeps_ranges() -> None:
    """Attention (tagged random for its dropout, drawn only when dropout_p > 0) is not refused;
    both programs keep the batch and sequence dims dynamic, the forward with the same ranges."""
    dyn = ({0: Dim("batch", min=2, max=16), 1: Dim("seq", min=2, max=128)}, None, None)
    examples = (torch.randn(2, 6, 16), torch.randn(16, 16), torch.randn(16, 16))
    ep = torch.export.export(_Flat(attention), examples, dynamic_shapes=(dyn,), strict=False)
    joint = export_joint(ep, [True, True, True])

    def root_ranges(program: torch.export.ExportedProgram) -> set[tuple[int, int]]:
        return {(int(r.lower), int(r.upper)) for s, r in program.range_constraints.items() if s.is_Symbol}

    assert root_ranges(joint.forward) == {(2, 16), (2, 128)}
    assert root_ranges(joint.backward) == {(2, 16), (2, 128)}
    assert joint.record.grad_inputs == (0, 1, 2)
