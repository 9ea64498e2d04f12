"""``@staticmethod`` over ``@aot_entry`` in a class body: found, built and called as a function
entry (it was refused as no method of the class), compiled once in this module (no wheel)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from helpers import compile_module_package, imported_fresh, run_traced

from aot_build.constants import ARTIFACT_DIR, MANIFEST_NAME
from aot_build.manifest import Manifest

PKG = "static_entry_pkg"
KEY = f"{PKG}:Ops.scaled"

SOURCE = """
import torch

from aot_build import aot_entry


class Ops:
    SCALE = 2.0

    @staticmethod
    @aot_entry(example_inputs=lambda: (torch.randn(4),))
    def scaled(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * Ops.SCALE
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, inductor_cache: Path) -> Path:
    build_lib, _ = compile_module_package(
        tmp_path_factory.mktemp("static-compile"), PKG, SOURCE, inductor_cache
    )
    return build_lib


@pytest.fixture
def pkg(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    with imported_fresh(PKG, root, monkeypatch) as module:
        yield module


def call(pkg: ModuleType, fn: Any, x: torch.Tensor) -> tuple[torch.Tensor, bool, list[str]]:
    """(result, whether Python ran, warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, ran = run_traced(fn, pkg.Ops.__dict__["scaled"].__func__.__wrapped__.__code__, x)
    return out, ran, [str(w.message) for w in caught]


def test_a_static_method_entry_is_built_and_called_through_the_class_and_an_instance(
    root: Path, pkg: ModuleType
) -> None:
    record = Manifest.read(root / PKG / ARTIFACT_DIR / MANIFEST_NAME).entry(KEY)
    assert record is not None and not record.method
    x = torch.randn(4)
    want = torch.relu(x) * 2.0
    for fn in (pkg.Ops.scaled, pkg.Ops().scaled):
        out, ran, warned = call(pkg, fn, x)
        assert (ran, warned) == (False, [])
        torch.testing.assert_close(out, want)
    pkg.Ops.SCALE = 3.0  # a class attribute it reads, changed after import: runs as Python
    out, ran, warned = call(pkg, pkg.Ops.scaled, x)
    assert ran and len(warned) == 1 and f"{PKG}.Ops.SCALE is float 3.0" in warned[0], warned
    torch.testing.assert_close(out, torch.relu(x) * 3.0)
