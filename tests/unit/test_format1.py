"""A package built by aot-build 0.1.0 (manifest format 1, frozen in tests/fixtures/format1)
runs compiled under today's reader: older wheels keep working after a format bump."""

from __future__ import annotations

import shutil
import sys
import warnings
from pathlib import Path

import torch
from helpers import run_traced

FIXTURE = Path(__file__).parents[1] / "fixtures" / "format1"


def test_format1_wheel_contents_run_compiled(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE, tmp_path / "site")
    sys.path.insert(0, str(tmp_path / "site"))
    try:
        import format1_pkg

        x = torch.randn(4, 8)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with torch.no_grad():
                out, ran_python = run_traced(format1_pkg.affine, format1_pkg.affine.__wrapped__.__code__, x)
        assert not ran_python, "the format-1 artifact did not serve the call"
        torch.testing.assert_close(out, format1_pkg.affine.__wrapped__(x))
        assert format1_pkg.affine.loaded_target() == "cpu-baseline"
    finally:
        sys.path.remove(str(tmp_path / "site"))
        sys.modules.pop("format1_pkg", None)
