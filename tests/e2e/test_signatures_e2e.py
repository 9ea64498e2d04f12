"""End to end, through real wheels: dynamic dimensions, several input sets, keyword
arguments, structured outputs, method entries, guards on package state (models of
transformers: test_hf_e2e.py). Built with ``python -m build --no-isolation`` in the dev environment,
installed into new environments (conftest ``venv_factory``), called from a neutral
directory with no compiler on PATH, an empty inductor cache, and ``AOT_BUILD_STRICT=1``
for every call that must run compiled."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import BuiltDists, Venv, sample_dists
from test_e2e import assert_compiled_call, assert_one_fallback, check


@pytest.fixture(scope="session")
def sig_dists(e2e_dir: Path, inductor_cache: Path) -> BuiltDists:
    return sample_dists("signatures", e2e_dir, inductor_cache)


@pytest.fixture(scope="session")
def sig_installed(venv_factory: Callable[..., Venv], sig_dists: BuiltDists) -> Venv:
    return venv_factory("sig-venv", sig_dists.wheel)


SIG = "sig_pkg"


def test_build_log_shows_ranges_variants_and_guards(sig_dists: BuiltDists) -> None:
    log = sig_dists.log
    x, mask = "x: float32[batch 2..64, seq 2..128, 8]", "mask: float32[batch 2..64, seq 2..128]"
    assert f"sig_pkg.dyn:masked_mean ({x}, {mask})" in log
    # every combination of the dimensions whose range includes 1 gets its own artifact
    assert "with batch=1)" in log and "with seq=1)" in log and "with batch=1, seq=1)" in log
    assert "sig_pkg.dyn:doubled (x: float32[batch 2..64, 8], y: float32[2*batch, 8])" in log
    guards = "guards 2 (2 eq) on 2 paths; weights 0; values: sig_pkg.state.MODE, sig_pkg.state.TEMP"
    assert f"sig_pkg.state:scaled (x: float32[4, 8]): {guards}" in log
    assert "sig_pkg.state:tied (x: float32[4, 8]): guards" in log and "(1 read through several paths)" in log


def test_calls_across_ranges_sets_and_signatures_run_compiled(sig_installed: Venv, tmp_path: Path) -> None:
    facts = check(sig_installed, "signatures", tmp_path, AOT_BUILD_STRICT="1")
    calls = {k: v for k, v in facts.items() if isinstance(v, dict) and "ran_python" in v}
    assert len(calls) >= 40, sorted(calls)
    for name, f in calls.items():
        assert_compiled_call(f, name)
    # both ends of every range, and the size-1 traps, were among them
    for name in (
        "scale_rows/1",
        "scale_rows/64",
        "masked_mean/1x1",
        "masked_mean/64x128",
        "squeeze_trap/1",
        "branch_on_one/1",
        "doubled/1",
        "block/1",
        "block/32",
        "auto_dim/100",
    ):
        assert name in calls
    assert facts["plain_outputs"] == [
        "Tensor",
        "int",
        "NoneType",
        "str",
        "float",
        "3",
        "None",
        "'done'",
        "2.5",
    ]
    assert facts["structured_types"] == {
        "stats": "Stats",
        "result": "Result",
        "count": 5,
        "label": "exp",
        "same_is_input": True,
        "list": "list",
    }
    assert facts["block/other-instance"]["changed"] is True  # its own weights, not the example's
    assert facts["vmap_shape"] == [5, 3, 16]
    assert facts["compile_matches"] is True
    assert "aten.mul.Tensor" in facts["export_ops"]


@pytest.mark.parametrize(
    ("case", "entry", "fragments"),
    [
        ("batch-65", "dyn:scale_rows", ["x dimension 0 (batch) is 65, compiled for batch 2..64 (and 1"]),
        ("seq-129", "dyn:masked_mean", ["x dimension 1 (seq) is 129, compiled for seq 2..128"]),
        ("non-contiguous", "dyn:scale_rows", ["x is not contiguous"]),
        ("dtype", "calls:by_dtype", ["x is float16, compiled for float32"]),
        ("scale=2.0", "calls:masked", ["scale is float 2.0, compiled for float 1.0"]),
        ("autocast", "dyn:scale_rows", ["autocast is enabled"]),
        ("block-heads", "blocks:Block.forward", ["self.heads is int 8, compiled for int 4"]),
        (
            "block-subclass",
            "blocks:Block.forward",
            ["self is a sig_pkg.blocks.WideBlock, compiled for sig_pkg.blocks:Block"],
        ),
        ("global-scalar", "state:scaled", ["sig_pkg.state.TEMP is float 3.0, compiled for float 2.0"]),
        (
            "module-attribute",
            "state:act",
            ["sig_pkg.state.ACT.kind is str 'sigmoid', compiled for str 'tanh'"],
        ),
        (
            "submodule-class",
            "state:seq",
            ["sig_pkg.state.SEQ.1 is a torch.nn.modules.activation.Tanh"],
        ),
        (
            "untied",
            "state:tied",
            [
                "weight sig_pkg.state.TIED.1.weight is no longer the same tensor as "
                "sig_pkg.state.TIED.0.weight"
            ],
        ),
        (
            "two-paths",
            "state:two_scales",
            ["helpers.SCALE is no longer the same tensor as sig_pkg.state.SCALE (one tensor when compiled)"],
        ),
        (
            "train-mode",
            "state:dropped",
            ["sig_pkg.state.DROP.1.training is bool True, compiled for bool False"],
        ),
        ("eps", "state:normed", ["sig_pkg.state.NORM.eps is float 0.5, compiled for float 1e-05"]),
        ("hook", "state:normed", ["sig_pkg.state.NORM._forward_hooks has 1 entries, compiled with 0"]),
    ],
)
def test_uncovered_calls_and_changed_state_fall_back(
    sig_installed: Venv,
    tmp_path: Path,
    fallback_facts: dict[str, Any],
    case: str,
    entry: str,
    fragments: list[str],
) -> None:
    assert_one_fallback(fallback_facts[case], f"{SIG}.{entry}", *fragments)


@pytest.fixture(scope="module")
def fallback_facts(sig_installed: Venv, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return check(sig_installed, "signature_fallbacks", tmp_path_factory.mktemp("fallbacks"))


def test_state_restored_runs_compiled_again(fallback_facts: dict[str, Any]) -> None:
    assert_compiled_call(fallback_facts["hook-removed"], "after the hook was removed")
