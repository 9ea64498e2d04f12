"""End to end, through a real wheel: models of transformers (BERT, GPT-2; random weights from
configs, no downloads) with dynamic batch and sequence, size-one variants, the library's own
output objects and guards on its config. Built with ``python -m build --no-isolation`` in the
dev environment, installed into a new environment (conftest ``venv_factory``), called from
a neutral directory with no compiler on PATH, an empty inductor cache, and
``AOT_BUILD_STRICT=1`` for every call that must run compiled."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import BuiltDists, Venv, sample_dists
from test_e2e import assert_compiled_call, assert_one_fallback, check


@pytest.fixture(scope="session")
def hf_dists(e2e_dir: Path, inductor_cache: Path) -> BuiltDists:
    return sample_dists("hf_models", e2e_dir, inductor_cache)


@pytest.fixture(scope="session")
def hf_installed(venv_factory: Callable[..., Venv], hf_dists: BuiltDists) -> Venv:
    # its dependencies (transformers) come from the package index; torch stays the local pin
    return venv_factory("hf-venv", hf_dists.wheel)


def test_transformers_models_run_compiled(hf_installed: Venv, tmp_path: Path) -> None:
    facts = check(hf_installed, "hf", tmp_path, AOT_BUILD_STRICT="1")
    calls = {k: v for k, v in facts.items() if isinstance(v, dict)}
    assert len(calls) == 13
    for name, f in calls.items():
        assert_compiled_call(f, name)
    assert facts["encode_type"] == "BaseModelOutputWithPoolingAndCrossAttentions"
    assert facts["encode/new-weights"]["changed"] is True


def test_transformers_fallbacks(hf_installed: Venv, tmp_path: Path) -> None:
    facts = check(hf_installed, "hf_fallbacks", tmp_path)
    assert_one_fallback(facts["batch-17"], "hf_pkg.models:encode", "input_ids dimension 0 (batch) is 17")
    assert_one_fallback(
        facts["config-flag"],
        "hf_pkg.models:encode",
        "hf_pkg.models.BERT.config.output_hidden_states is bool True, compiled for bool False",
    )
    assert facts["hidden_states"] is True
