"""torch's SDPA backend flags changed after import: an entry calling
``F.scaled_dot_product_attention`` compiled once in this module (no wheel), beside one that
does not. While the flags are as compiled the call runs compiled; with one changed
(``enable_flash_sdp(False)``, an ``sdpa_kernel`` block) it runs as Python, with a warning
naming the flag and the fix, and returns eager's result, or raises eager's error when every
backend is off. The entry without SDPA runs compiled whatever the flags.

The package is written here and compiled by ``python -m aot_build.compile`` (the build's child
process), as test_inplace.py does; every test imports a fresh copy.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from helpers import compile_module_package, imported_fresh, run_traced
from torch.nn.attention import SDPBackend, sdpa_kernel

from aot_build import sdpa
from aot_build.constants import ARTIFACT_DIR, MANIFEST_NAME
from aot_build.errors import FallbackWarning
from aot_build.manifest import Manifest

PKG = "sdpa_unit_pkg"

SOURCE = """
import torch
import torch.nn.functional as F

from aot_build import aot_entry


def _qkv():
    return tuple(torch.randn(2, 4, 8, 16) for _ in range(3))


@aot_entry(example_inputs=_qkv)
def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


@aot_entry(example_inputs=_qkv)
def plain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return torch.softmax(q @ k.transpose(-2, -1), -1) @ v
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, inductor_cache: Path) -> Path:
    build_lib, _ = compile_module_package(
        tmp_path_factory.mktemp("sdpa-compile"), PKG, SOURCE, inductor_cache
    )
    return build_lib


@pytest.fixture
def pkg(root: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    before = sdpa.current()
    with imported_fresh(PKG, root, monkeypatch) as module:
        yield module
    assert sdpa.current() == before  # each change is undone by its test


def call(entry: Any, *args: Any) -> tuple[Any, bool, list[str]]:
    """(result, whether Python ran, fallback warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, ran = run_traced(entry, entry.__wrapped__.__code__, *args)
    assert all(issubclass(w.category, FallbackWarning) for w in caught), [str(w.message) for w in caught]
    return out, ran, [str(w.message) for w in caught]


def qkv() -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(2, 4, 8, 16) for _ in range(3))


@contextmanager
def _switched(setter: Callable[[bool], None]) -> Iterator[None]:
    setter(False)
    try:
        yield
    finally:
        setter(True)


#: (case, the change as a context manager, the flag the warning names, the fix it gives)
CHANGES: list[tuple[str, Callable[[], AbstractContextManager[Any]], str, str]] = [
    (
        "enable_flash_sdp",
        lambda: _switched(torch.backends.cuda.enable_flash_sdp),
        "flash_sdp_enabled is False, compiled with True",
        "torch.backends.cuda.enable_flash_sdp(True)",
    ),
    (
        "sdpa_kernel",
        lambda: sdpa_kernel(SDPBackend.MATH),
        "flash_sdp_enabled is False, compiled with True",
        "call outside the sdpa_kernel block",
    ),
    (
        "enable_math_sdp",
        lambda: _switched(torch.backends.cuda.enable_math_sdp),
        "math_sdp_enabled is False, compiled with True",
        "torch.backends.cuda.enable_math_sdp(True)",
    ),
]


def test_manifest_records_the_flags_of_the_sdpa_entry_only(root: Path) -> None:
    folder = root / PKG / ARTIFACT_DIR
    manifest = Manifest.read(folder / MANIFEST_NAME)
    attend, plain = (manifest.entries[f"{PKG}:{name}"] for name in ("attend", "plain"))
    assert [v.sdpa for v in attend.variants] == [{f.name: f.default for f in sdpa.FLAGS}]
    assert [v.sdpa for v in plain.variants] == [{}]
    # a program without SDPA has a record without the field: as before it existed
    raw = json.loads((folder / MANIFEST_NAME).read_text())
    record = json.loads((folder / raw["entries"][f"{PKG}:plain"]).read_text())
    assert "sdpa" not in record["variants"][0]


def test_unchanged_flags_run_compiled(pkg: ModuleType) -> None:
    q, k, v = qkv()
    got, ran, warned = call(pkg.attend, q, k, v)
    assert (ran, warned) == (False, [])
    torch.testing.assert_close(got, pkg.attend.__wrapped__(q, k, v), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("change", "flag", "fix"), [c[1:] for c in CHANGES], ids=[c[0] for c in CHANGES])
def test_a_changed_flag_runs_python_naming_it(
    pkg: ModuleType, change: Callable[[], AbstractContextManager[Any]], flag: str, fix: str
) -> None:
    q, k, v = qkv()
    with change():
        got, ran, warned = call(pkg.attend, q, k, v)
        want = pkg.attend.__wrapped__(q, k, v)
        # the entry without SDPA does not read the flags
        assert call(pkg.plain, q, k, v)[1:] == (False, [])
    assert ran and len(warned) == 1, warned
    assert f"{PKG}:attend runs as plain Python: the scaled-dot-product-attention flag {flag}" in warned[0]
    assert "Restore it: " in warned[0] and fix in warned[0]
    assert torch.equal(got, want)  # eager's result under the changed flags, bit for bit
    # undone: compiled again
    assert call(pkg.attend, q, k, v)[1:] == (False, [])


def test_every_backend_off_raises_eagers_error(pkg: ModuleType) -> None:
    """Eager refuses: so does the call (the artifact would have returned a result)."""
    q, k, v = qkv()
    with _switched(torch.backends.cuda.enable_flash_sdp), _switched(torch.backends.cuda.enable_math_sdp):
        with pytest.raises(RuntimeError) as eager:
            pkg.attend.__wrapped__(q, k, v)
        with warnings.catch_warnings(record=True) as caught, pytest.raises(RuntimeError) as info:
            warnings.simplefilter("always")
            pkg.attend(q, k, v)
    assert str(info.value) == str(eager.value)
    (w,) = caught
    assert "flash_sdp_enabled is False, compiled with True" in str(w.message)
