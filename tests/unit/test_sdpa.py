"""torch's SDPA backend flags (aot_build.sdpa): what the build records of a program that calls
scaled_dot_product_attention, what it refuses, and the shim's per-call check. The compiled
package's calls are in tests/e2e/test_sdpa_e2e.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F
from helpers import REPO_ROOT
from torch.nn.attention import SDPBackend, sdpa_kernel

from aot_build import sdpa
from aot_build.errors import CompileError

Q = torch.randn(1, 2, 4, 8)


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    """Every flag as torch starts, after each test too."""
    before = sdpa.current()
    assert before == {f.name: f.default for f in sdpa.FLAGS}
    yield
    torch.backends.cuda.enable_flash_sdp(before["flash_sdp_enabled"])
    torch.backends.cuda.enable_math_sdp(before["math_sdp_enabled"])
    assert sdpa.current() == before


def _graph(fn: torch.nn.Module) -> torch.fx.GraphModule:
    return torch.export.export(fn, (Q, Q + 1, Q + 2)).graph_module


class _Attend(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


class _Plain(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.softmax(q @ k.transpose(-2, -1), -1) @ v


def test_the_defaults_are_a_fresh_interpreters() -> None:
    """The build refuses flags other than FLAGS' defaults because its compile workers, fresh
    interpreters, have those."""
    code = "import json; from aot_build import sdpa; print(json.dumps(sdpa.current()))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    ).stdout
    assert json.loads(out) == {f.name: f.default for f in sdpa.FLAGS}
    # every flag getter torch has is read
    getters = {
        n for n in dir(torch._C) if n.startswith("_get_") and "sdp" in n and n != "_get_sdp_priority_order"
    }
    assert {getattr(f.read, "__name__", "") for f in sdpa.FLAGS} >= getters


def test_only_a_program_calling_sdpa_records_the_flags() -> None:
    assert sdpa.compiled_flags(_graph(_Attend()), "pkg:attend") == sdpa.current()
    assert sdpa.compiled_flags(_graph(_Plain()), "pkg:plain") == {}


def test_a_trace_under_other_flags_is_refused_naming_the_flag_and_the_fix() -> None:
    graph = _graph(_Attend())
    torch.backends.cuda.enable_flash_sdp(False)
    with pytest.raises(CompileError) as info:
        sdpa.compiled_flags(graph, "pkg:attend (pkg/__init__.py:3)")
    assert str(info.value).startswith("pkg:attend (pkg/__init__.py:3): calls scaled_dot_product_attention")
    assert "SDPA flag flash_sdp_enabled is False, not torch's default True" in str(info.value)
    assert "set the flag in the code that uses the package, not at import" in str(info.value)
    assert sdpa.compiled_flags(_graph(_Plain()), "pkg:plain") == {}  # no SDPA: the flags do not matter


def test_the_check_names_the_changed_flag_and_the_fix() -> None:
    check = sdpa.FlagCheck(sdpa.current())
    assert check.changed() is None
    with sdpa_kernel(SDPBackend.MATH):
        assert check.changed() == "flash_sdp_enabled"
        assert check.explain("flash_sdp_enabled") == (
            "the scaled-dot-product-attention flag flash_sdp_enabled is False, compiled with True "
            "(torch.backends.cuda.enable_flash_sdp(False), or a torch.nn.attention.sdpa_kernel(...) "
            "block): eager would choose another attention kernel. Restore it: "
            "torch.backends.cuda.enable_flash_sdp(True), or call outside the sdpa_kernel block"
        )
    assert check.changed() is None
    every = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
    every += [SDPBackend.CUDNN_ATTENTION, SDPBackend.OVERRIDEABLE]
    with sdpa_kernel(every[::-1], set_priority=True):  # every backend on, in another order
        assert check.changed() == "sdp_priority_order"
        assert "sdpa_kernel(..., set_priority=True)" in check.explain("sdp_priority_order")
    torch.backends.cuda.enable_math_sdp(False)
    assert check.changed() == "math_sdp_enabled"


def test_a_record_of_other_flags_than_this_torchs_never_passes() -> None:
    for recorded in ({**sdpa.current(), "newer_sdp_enabled": True}, {"flash_sdp_enabled": True}):
        check = sdpa.FlagCheck(recorded)
        name = check.changed()
        assert name is not None
        assert "rebuild the wheel" in check.explain(name)
