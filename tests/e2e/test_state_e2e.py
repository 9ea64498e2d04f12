"""Every kind of state a library author's code reads, changed after import in an installed
wheel (tests/packages/state_pkg, real ``python -m build``, installed into a new
environment, run with no compiler on PATH): before the change the call runs compiled and
equals eager; after it the call equals eager (it runs as Python, with one warning naming
what changed); once the change is undone it runs compiled again. Each case here returned a
silently different result with aot-build 0.3."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import Venv, run_script, sample_dists

#: (case, the change, its undo, what the warning names) -- Python source run in the venv.
CASES = [
    ("closure cell", "K.SET_Z(3.0)", "K.SET_Z(2.0)", "SCALER.__closure__[0].cell_contents is float 3.0"),
    ("constants class", "K.Const.K = 4.0", "K.Const.K = 3.0", "state_pkg.kinds.Const.K is float 4.0"),
    ("SimpleNamespace", "K.NS.scale = 2.5", "K.NS.scale = 1.5", "state_pkg.kinds.NS.scale is float 2.5"),
    ("EasyDict-style dict", "K.CFG['shift'] = 0.5", "K.CFG['shift'] = 0.25", "CFG['shift'] is float 0.5"),
    (
        "dict read as registry key",
        "K.CFG['act'] = 'relu'",
        "K.CFG['act'] = 'gelu'",
        "CFG['act'] is str 'relu'",
    ),
    ("OrderedDict", "K.OD['gain'] = 2.0", "K.OD['gain'] = 1.0", "state_pkg.kinds.OD['gain'] is float 2.0"),
    ("dict with a module", "K.MIXED['alpha'] = 0.7", "K.MIXED['alpha'] = 0.5", "MIXED['alpha'] is float 0.7"),
    (
        "set of flags",
        "K.FLAGS.discard('clip')",
        "K.FLAGS.add('clip')",
        "state_pkg.kinds.FLAGS no longer contains 'clip'",
    ),
    (
        "numpy scalar",
        "K.NP_SCALE = np.float32(3.0)",
        "K.NP_SCALE = np.float32(2.0)",
        "state_pkg.kinds.NP_SCALE is float32",
    ),
    (
        "registry of functions",
        "K.ACTS['gelu'] = torch.relu",
        "K.ACTS['gelu'] = F.gelu",
        "ACTS['gelu'] was replaced",
    ),
    (
        "partial",
        "K.CLAMP = functools.partial(torch.clamp, min=0.0)",
        "K.CLAMP = functools.partial(torch.clamp, min=-1.0)",
        "CLAMP.keywords['min'] is float 0.0",
    ),
    (
        "os.environ",
        "os.environ['STATE_PKG_SHIFT'] = '1'",
        "del os.environ['STATE_PKG_SHIFT']",
        "os.environ._data now contains b'STATE_PKG_SHIFT'",
    ),
    (
        "torch global state",
        "torch.use_deterministic_algorithms(True)",
        "torch.use_deterministic_algorithms(False)",
        "deterministic algorithms are on (torch.use_deterministic_algorithms)",
    ),
    (
        "grad mode",
        "torch.set_grad_enabled(True)",
        "torch.set_grad_enabled(False)",
        "torch.is_grad_enabled() is bool True, compiled for bool False",
    ),
    (
        "machine state",
        "torch._C._cuda_getDeviceCount = lambda: 1",  # a CUDA build on a GPU machine
        "del torch._C._cuda_getDeviceCount",
        "torch.cuda.is_available() is bool True, compiled for bool False",
    ),
    (
        "class registered with an ABC",
        "K.Scaling.register(K.Doubling)",
        "abc._reset_registry(K.Scaling); abc._reset_caches(K.Scaling)",
        "isinstance(state_pkg.kinds.STEP, state_pkg.kinds:Scaling) is True, compiled for False",
    ),
    (
        "lru_cache helper",
        "K.CACHE_K = 5.0; K.cached.cache_clear()",
        "K.CACHE_K = 4.0; K.cached.cache_clear()",
        "state_pkg.kinds.CACHE_K is float 5.0",
    ),
    (
        "method replaced on the class",
        "K.nn.Linear.forward = lambda self, x: x",
        "K.nn.Linear.forward = LINEAR_FORWARD",
        ").forward was replaced (compiled for torch.nn.modules.linear:Linear.forward",
    ),
    (
        "global module hook",
        "HOOK[0] = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o + 1)",
        "HOOK[0].remove()",
        "_global_forward_hooks has 1 entries",
    ),
    (
        "os.getenv",
        "os.environ['STATE_PKG_DOUBLE'] = '1'",
        "del os.environ['STATE_PKG_DOUBLE']",
        "os.environ._data now contains b'STATE_PKG_DOUBLE'",
    ),
    (
        "optional module attribute",
        "K.extras.GAIN = 2.0",
        "del K.extras.GAIN",
        "state_pkg.kinds.extras.GAIN now exists",
    ),
    (
        "sign of zero",
        "K.ZERO = -0.0",
        "K.ZERO = 0.0",
        "state_pkg.kinds.ZERO is float -0.0, compiled for float 0.0",
    ),
    (
        "helper code replaced (a reload)",
        "K.offset.__code__ = (lambda y: y - 0.5).__code__",
        "K.offset.__code__ = OFFSET_CODE",
        "state_pkg.kinds.offset.__code__ was replaced",
    ),
    (
        "module replaced",
        "K.MIXED['net'] = torch.nn.Identity()",
        "K.MIXED['net'] = NET",
        "state_pkg.kinds.MIXED['net'] is a torch.nn.modules.linear.Identity",
    ),
]

SCRIPT = """
import abc, functools, json, os, sys, warnings
import numpy as np
import torch
import torch.nn.functional as F
import state_pkg.kinds as K
from aot_build.errors import FallbackWarning

CASES = {cases}
HOOK = [None]
LINEAR_FORWARD = K.nn.Linear.forward
NET = K.MIXED["net"]
OFFSET_CODE = K.offset.__code__


def call(entry, *args):
    code, ran = entry.__wrapped__.__code__, []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code is code:
            ran.append(True)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.setprofile(profile)
        try:
            out = entry(*args)
        finally:
            sys.setprofile(None)
    eager = entry.__wrapped__(*args)
    msgs = [str(w.message) for w in caught if issubclass(w.category, FallbackWarning)]
    # Outputs reach ~100 (the scales multiply): compiled kernels sum in another order than
    # eager, a few 1e-6 apart (more on other CPUs); a change below that alters the result
    # alters it by 1 or more.
    equal = torch.allclose(out, eager, rtol=1e-4, atol=1e-4)
    return {{"python": bool(ran), "equal": equal, "warnings": msgs}}


x = torch.randn(4, 8)
out = {{}}
with torch.no_grad():
    for name, change, undo, _ in CASES:
        before = call(K.reads_state, x)
        exec(change)
        after = call(K.reads_state, x)
        exec(undo)
        again = call(K.reads_state, x)
        out[name] = [before, after, again]
    lazy = [call(K.reads_lazy, x), call(K.reads_lazy, x)]
    K._LAZY[3] = 1.0
    lazy.append(call(K.reads_lazy, x))
    gate, other = K.GATE, K.Gate().eval()
    method = [call(K.Gate.forward, gate, x), call(K.Gate.forward, other, x)]
    K.Gate.BIAS = 0.75
    method.append(call(K.Gate.forward, other, x))
print("RESULT: " + json.dumps({{"cases": out, "lazy": lazy, "method": method}}))
"""


@pytest.fixture(scope="module")
def state_run(
    venv_factory: Callable[..., Venv],
    e2e_dir: Path,
    inductor_cache: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Any]:
    dists = sample_dists("state_pkg", e2e_dir, inductor_cache)
    venv = venv_factory("state-venv", dists.wheel, "numpy==2.4.6")
    script = SCRIPT.format(cases=json.dumps([list(c) for c in CASES]))
    return run_script(venv, script, tmp_path_factory.mktemp("state"))


@pytest.mark.parametrize(("case", "names"), [(c[0], c[3]) for c in CASES], ids=[c[0] for c in CASES])
def test_a_change_after_import_never_gives_a_wrong_result(
    state_run: dict[str, Any], case: str, names: str
) -> None:
    before, after, again = state_run["cases"][case]
    assert before == {"python": False, "equal": True, "warnings": []}, before  # compiled
    assert after["python"] and after["equal"], after  # the Python function ran: eager's result
    (warning,) = after["warnings"]
    assert names in warning and "runs as plain Python" in warning
    assert again == {"python": False, "equal": True, "warnings": []}, again  # compiled again


def test_a_table_filled_on_first_use(state_run: dict[str, Any]) -> None:
    """Filled by the build's first run, empty in a fresh process: the first call runs as
    Python (it fills the table), later ones compiled; a changed entry is noticed."""
    first, second, changed = state_run["lazy"]
    assert (
        first["python"]
        and first["equal"]
        and "state_pkg.kinds._LAZY no longer contains 3" in first["warnings"][0]
    )
    assert second == {"python": False, "equal": True, "warnings": []}
    assert changed["python"] and changed["equal"] and "_LAZY[3] is float 1.0" in changed["warnings"][0]


def test_a_method_entry_reads_its_class_attributes(state_run: dict[str, Any]) -> None:
    own, other, changed = state_run["method"]
    assert own == other == {"python": False, "equal": True, "warnings": []}
    assert (
        changed["python"] and changed["equal"] and "type(self).BIAS is float 0.75" in changed["warnings"][0]
    )
