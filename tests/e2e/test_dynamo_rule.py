"""The ``dynamo`` rule (aot_build.backends.dynamo:DynamoBackend): build in this process through the
Rule protocol, load in a fresh one (empty Inductor cache, read-only artifact folder).

Loading compiles the artifact's C++ (upstream stores source, not binaries), so these tests
need a C++ compiler; one test checks the error without one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

MODULE = """
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))


def f(x):
    return model(x).relu() * 2


class Net(torch.nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.l1 = torch.nn.Linear(16, width)
        self.l2 = torch.nn.Linear(width, 8)

    def forward(self, x):
        return self.l2(torch.nn.functional.gelu(self.l1(x))).relu() * 2


net = Net()
"""

LOAD = """
import json, sys, time
import torch
sys.path.insert(0, {mod_dir!r})
import dynmod
from aot_build.backends import Refused
from aot_build.backends.dynamo import DynamoBackend

rule = DynamoBackend()
out = {{}}

def raises(call):
    try:
        call()
    except Refused as exc:
        return "refused: " + type(exc).__name__ + ": " + str(exc)[:200]
    except Exception as exc:
        return "other: " + type(exc).__name__ + ": " + str(exc)[:200]
    return "ran"

def close(a, b):
    return bool(torch.allclose(a, b, atol=1e-5))

# --- inference artifact (built under no_grad), plain function reading a module global
t = time.perf_counter()
c = rule.load({infer!r}, "cpu", dynmod.f)
out["load_s"] = time.perf_counter() - t
x = torch.randn(5, 16)
x9 = torch.randn(9, 16)
with torch.no_grad():
    out["first"] = close(c(x), dynmod.f(x))
    out["batch9"] = close(c(x9), dynmod.f(x9))
    dynmod.model.load_state_dict({{k: torch.randn_like(v) for k, v in dynmod.model.state_dict().items()}})
    out["new_weights"] = close(c(x), dynmod.f(x))
    xg = x.clone().requires_grad_()
    out["arg_requires_grad"] = close(c(xg), dynmod.f(x))
    out["float64"] = raises(lambda: c(x.double()))
    out["rank3"] = raises(lambda: c(x[None]))
    out["batch_too_big"] = raises(lambda: c(torch.randn(100, 16)))
out["grad_enabled"] = raises(lambda: c(x))
with torch.no_grad():
    dynmod.model[0] = torch.nn.Linear(16, 32)  # same shape: runs, with the new module's weights
    out["rebound_same_shape"] = close(c(x), dynmod.f(x))
    dynmod.model[0] = torch.nn.Linear(16, 32, dtype=torch.float64)
    out["weight_dtype"] = raises(lambda: c(x))
    dynmod.model[0] = torch.nn.Linear(16, 32)
    dynmod.model[0].requires_grad_(False)
    out["weights_no_requires_grad"] = raises(lambda: c(x))
    dynmod.model[0] = torch.nn.Linear(16, 32)
    handle = dynmod.model[0].register_forward_hook(lambda m, i, o: o * 0)
    out["hook"] = raises(lambda: c(x))
    handle.remove()
    out["hook_removed"] = close(c(x), dynmod.f(x))

# --- training artifact (grad=True): gradients match eager
g = rule.load({train!r}, "cpu", dynmod.f)
y = g(x)
y.sum().backward()
grads = [p.grad.clone() for p in dynmod.model.parameters()]
dynmod.model.zero_grad()
ref = dynmod.f(x)
ref.sum().backward()
out["train_out"] = close(y, ref)
out["train_grads"] = all(close(a, p.grad) for a, p in zip(grads, dynmod.model.parameters(), strict=True))
# built with an input not requiring grad: one that does is another graph (grad-enabled call)
out["train_input_requires_grad"] = raises(lambda: g(x.clone().requires_grad_()))
with torch.no_grad():
    out["train_no_grad"] = raises(lambda: g(x))

# --- method entry: Net.forward, weights read from the instance passed as self
m = rule.load({method!r}, "cpu", dynmod.Net.forward)
with torch.no_grad():
    out["method"] = close(m(dynmod.net, x9), dynmod.net(x9))
    other = dynmod.Net()
    out["method_other_instance"] = close(m(other, x), other(x))
    out["method_other_width"] = raises(lambda: m(dynmod.Net(width=64), x))
print("RESULT " + json.dumps(out))
"""


def _import_module(mod_dir: Path) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("dynmod", mod_dir / "dynmod.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["dynmod"] = mod  # guards on the class of a method entry's self pickle it by name
    spec.loader.exec_module(mod)
    return mod


def _request(out_dir: Path, function: Any, args: tuple[Any, ...], dynamic_shapes: Any, grad: bool) -> Any:
    from aot_build.backends import FunctionRequest
    from aot_build.build_config import BuildConfig
    from aot_build.targets import parse_target

    return FunctionRequest(
        function=function,
        args=args,
        dynamic_shapes=dynamic_shapes,
        grad=grad,
        target=parse_target("cpu-avx2" if os.uname().machine == "x86_64" else "cpu-baseline"),
        out_dir=out_dir,
        config=BuildConfig(build_lib="", inductor_options={"max_autotune": False}),
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Module folder and three artifacts (inference, training, method), built in this process."""
    from torch.export import Dim

    from aot_build.backends import CALL, Backend, Built
    from aot_build.backends.dynamo import DynamoBackend

    rule = DynamoBackend()
    assert isinstance(rule, Backend) and rule.convention == CALL
    assert (rule.name, rule.version) == ("dynamo", "1")
    tmp = tmp_path_factory.mktemp("dynamo")
    mod_dir = tmp / "src"
    mod_dir.mkdir()
    (mod_dir / "dynmod.py").write_text(MODULE)
    mod = _import_module(mod_dir)
    out = tmp / "out"
    x = torch.randn(4, 16)
    batch = Dim("batch", min=1, max=64)
    before = [p.detach().clone() for p in mod.model.parameters()]
    results: dict[str, Built] = {
        "infer": rule.compile(_request(out, mod.f, (x,), {"x": {0: batch}}, grad=False)),
        "train": rule.compile(_request(out, mod.f, (x,), ({0: batch},), grad=True)),
        "method": rule.compile(_request(out, mod.Net.forward, (mod.net, x), (None, {0: batch}), grad=False)),
    }
    assert torch.is_grad_enabled()
    assert all(torch.equal(a, p) for a, p in zip(before, mod.model.parameters(), strict=True))
    for b in results.values():
        data = b.path.read_bytes()
        assert b.path.suffix == ".dynamo" and b.path.parent == out
        assert b.sha256 == hashlib.sha256(data).hexdigest() and b.path.stem == b.sha256[:24]
        assert b.size == len(data) < 1_000_000  # weights are not in the file
        assert b.isa == ("AVX2" if os.uname().machine == "x86_64" else "scalar (no vector ISA)")
    assert len({b.path for b in results.values()}) == 3
    yield {"mod_dir": mod_dir, **{k: b.path for k, b in results.items()}}
    sys.modules.pop("dynmod", None)


def _run(
    code: str, cache: Path, env_extra: dict[str, str] | None = None, drop: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update({"TORCHINDUCTOR_CACHE_DIR": str(cache), "PYTHONDONTWRITEBYTECODE": "1"})
    env["PYTHONPATH"] = str(ROOT)
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, cwd=cache.parent
    )


NO_CXX = shutil.which("g++") is None and shutil.which("c++") is None


@pytest.mark.skipif(NO_CXX, reason="needs a C++ compiler")
def test_load_in_fresh_process(built: dict[str, Path], tmp_path: Path) -> None:
    cache = tmp_path / "inductor-cache"
    cache.mkdir()
    folder = built["infer"].parent
    folder.chmod(0o555)  # the load must write nothing next to the artifact
    try:
        code = LOAD.format(
            mod_dir=str(built["mod_dir"]),
            infer=str(built["infer"]),
            train=str(built["train"]),
            method=str(built["method"]),
        )
        proc = _run(textwrap.dedent(code), cache)
    finally:
        folder.chmod(0o755)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout + proc.stderr
    out = json.loads(lines[0][len("RESULT ") :])
    for key in (
        "first",
        "batch9",
        "new_weights",  # weights changed after load are used
        "arg_requires_grad",  # an argument requiring grad, under no_grad: passed detached
        "rebound_same_shape",
        "hook_removed",
        "train_out",
        "train_grads",
        "method",
        "method_other_instance",  # a method entry reads the weights of the self it is given
    ):
        assert out[key] is True, (key, out)
    refused = (
        "float64",
        "rank3",
        "batch_too_big",
        "grad_enabled",  # built for no_grad calls
        "weight_dtype",
        "weights_no_requires_grad",  # requires_grad of weights stays guarded
        "hook",
        "train_no_grad",  # built for grad-enabled calls
        "train_input_requires_grad",
        "method_other_width",
    )
    for key in refused:
        assert out[key].startswith("refused: DynamoGuardError"), (key, out[key])
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        built[k].name for k in ("infer", "train", "method")
    )


def test_load_without_compiler(built: dict[str, Path], tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(built["mod_dir"])!r})
        import dynmod
        from aot_build.backends import Refused
        from aot_build.backends.dynamo import DynamoLoadError, DynamoBackend
        try:
            DynamoBackend().load({str(built["infer"])!r}, "cpu", dynmod.f)
        except Refused as exc:
            print("REFUSED", exc)
        except DynamoLoadError as exc:
            print("LOADERROR", exc)
        else:
            print("LOADED")
    """)
    cache = tmp_path / "inductor-cache"
    cache.mkdir()
    proc = _run(code, cache, {"PATH": str(Path(sys.executable).parent)}, drop=("CXX", "CC"))
    assert proc.returncode == 0, proc.stderr
    assert "LOADERROR" in proc.stdout and "C++ compiler" in proc.stdout, proc.stdout + proc.stderr


def test_build_rejects_bad_dynamic_shapes(built: dict[str, Path], tmp_path: Path) -> None:
    from aot_build.backends.dynamo import DynamoBackend, DynamoBuildError

    def g(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    with pytest.raises(DynamoBuildError, match="not arguments"):
        DynamoBackend().compile(_request(tmp_path, g, (torch.randn(3),), {"y": {0: None}}, grad=False))
    with pytest.raises(DynamoBuildError, match="2 entries for 1 arguments"):
        DynamoBackend().compile(_request(tmp_path, g, (torch.randn(3),), (None, None), grad=False))


def test_guard_error_is_refused_and_cuda_target_rejected(tmp_path: Path) -> None:
    from aot_build.backends import Refused
    from aot_build.backends.dynamo import DynamoBackend, DynamoBuildError, DynamoGuardError
    from aot_build.errors import AotBuildError
    from aot_build.targets import parse_target

    assert issubclass(DynamoGuardError, Refused) and issubclass(DynamoGuardError, AotBuildError)
    req = _request(tmp_path, lambda x: x, (torch.randn(3),), None, grad=False)
    req = type(req)(**{**req.__dict__, "target": parse_target("cuda-sm90")})
    with pytest.raises(DynamoBuildError, match="CPU targets only"):
        DynamoBackend().compile(req)


def test_read_header_rejects_other_files() -> None:
    from aot_build.backends.dynamo import DynamoLoadError, read_header

    with pytest.raises(DynamoLoadError, match="bad magic"):
        read_header(b"not an artifact")
