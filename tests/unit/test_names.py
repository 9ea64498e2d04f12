"""Dotted-name helpers: the package that holds a module's artifacts."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from aot_build.names import in_package, package_root, top_package


def test_top_package_and_in_package() -> None:
    assert top_package("a.b.c") == "a"
    assert in_package("a.b", "a") and in_package("a", "a")
    assert not in_package("ab.c", "a")


def test_package_root_skips_namespace_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ns`` has no __init__.py (shared by several distributions): the artifacts of
    ``ns.alpha.mod`` belong to ``ns.alpha``; a regular top-level package holds its own."""
    (tmp_path / "ns" / "alpha" / "sub").mkdir(parents=True)
    (tmp_path / "ns" / "alpha" / "__init__.py").write_text("")
    (tmp_path / "ns" / "alpha" / "sub" / "__init__.py").write_text("")
    (tmp_path / "ns" / "alpha" / "sub" / "mod.py").write_text("")
    (tmp_path / "regular" / "inner").mkdir(parents=True)
    (tmp_path / "regular" / "__init__.py").write_text("")
    (tmp_path / "regular" / "inner" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        importlib.import_module("ns.alpha.sub.mod")
        importlib.import_module("regular.inner")
        assert package_root("ns.alpha.sub.mod") == "ns.alpha"
        assert package_root("ns.alpha") == "ns.alpha"
        assert package_root("regular.inner") == "regular"
        assert package_root("not_imported.x") == "not_imported"  # nothing to look at
    finally:
        for name in [n for n in sys.modules if n.split(".")[0] in ("ns", "regular")]:
            del sys.modules[name]
