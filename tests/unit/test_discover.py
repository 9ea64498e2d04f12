"""Discovery: which modules the build imports and which entries it finds there."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from aot_build.discover import discover_entries, list_modules
from aot_build.errors import CompileError
from aot_build.settings import Settings

DEFAULT_EXCLUDE = Settings().exclude


def _touch(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("", encoding="utf-8")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    _touch(
        tmp_path,
        "pkg/__init__.py",
        "pkg/core.py",
        "pkg/conftest.py",
        "pkg/test_core.py",
        "pkg/notes.txt",
        "pkg/sub/__init__.py",
        "pkg/sub/ops.py",
        "pkg/tests/__init__.py",
        "pkg/tests/helpers.py",
        "pkg/tests/deep/__init__.py",
        "other/__init__.py",
        "other/thing.py",
    )
    return tmp_path


def test_lists_modules_of_given_packages(tree: Path) -> None:
    packages = ["pkg", "pkg.sub", "pkg.tests", "pkg.tests.deep"]
    assert list_modules(tree, packages, []) == [
        "pkg",
        "pkg.conftest",
        "pkg.core",
        "pkg.sub",
        "pkg.sub.ops",
        "pkg.test_core",
        "pkg.tests",
        "pkg.tests.deep",
        "pkg.tests.helpers",
    ]


def test_default_exclude_drops_tests(tree: Path) -> None:
    packages = ["pkg", "pkg.sub", "pkg.tests", "pkg.tests.deep"]
    assert list_modules(tree, packages, DEFAULT_EXCLUDE) == ["pkg", "pkg.core", "pkg.sub", "pkg.sub.ops"]


def test_custom_exclude_patterns(tree: Path) -> None:
    packages = ["pkg", "pkg.sub"]
    assert list_modules(tree, packages, ["pkg.sub*", "*.c*"]) == ["pkg", "pkg.test_core"]
    assert list_modules(tree, packages, ["pkg.core"]) == [
        "pkg",
        "pkg.conftest",
        "pkg.sub",
        "pkg.sub.ops",
        "pkg.test_core",
    ]


def test_only_listed_packages(tree: Path) -> None:
    assert list_modules(tree, ["other"], []) == ["other", "other.thing"]
    assert list_modules(tree, [], []) == []


@pytest.fixture
def importable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on sys.path; the ``disc_*`` modules imported from it are forgotten afterwards
    (only those: torch, imported on the way, must stay)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [n for n in sys.modules if n.split(".")[0].startswith("disc_")]:
        del sys.modules[name]


ENTRY_MODULE = textwrap.dedent(
    """
    import torch
    from aot_build import aot_entry

    @aot_entry(example_inputs=lambda: (torch.zeros(2),))
    def {name}(x):
        return x
    """
)


def test_discover_entries_sorted_and_limited_to_packages(importable: Path) -> None:
    (importable / "disc_pkg_a").mkdir()
    (importable / "disc_pkg_a" / "__init__.py").write_text("")
    (importable / "disc_pkg_a" / "zmod.py").write_text(ENTRY_MODULE.format(name="zeta"))
    (importable / "disc_pkg_a" / "amod.py").write_text(ENTRY_MODULE.format(name="alpha"))
    (importable / "disc_pkg_b.py").write_text(ENTRY_MODULE.format(name="beta"))
    entries = discover_entries(
        ["disc_pkg_a", "disc_pkg_a.zmod", "disc_pkg_a.amod", "disc_pkg_b"], ["disc_pkg_a"]
    )
    assert [e.key for e in entries] == ["disc_pkg_a.amod:alpha", "disc_pkg_a.zmod:zeta"]


def test_import_errors_name_every_failing_module(
    importable: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (importable / "disc_broken").mkdir()
    (importable / "disc_broken" / "__init__.py").write_text("")
    (importable / "disc_broken" / "bad.py").write_text("import torch\nraise ImportError('needs libfoo')\n")
    (importable / "disc_broken" / "worse.py").write_text("x = 1 / 0\n")
    (importable / "disc_broken" / "fine.py").write_text(ENTRY_MODULE.format(name="fine"))
    modules = ["disc_broken", "disc_broken.bad", "disc_broken.fine", "disc_broken.worse"]
    with pytest.raises(CompileError) as info:
        discover_entries(modules, ["disc_broken"])
    msg = str(info.value)
    assert "2 of 4 modules failed to import" in msg
    assert "disc_broken.bad, disc_broken.worse" in msg
    assert "exclude" in msg  # names the way out
    err = capsys.readouterr().err
    assert "cannot import module 'disc_broken.bad'" in err and "ImportError: needs libfoo" in err
    assert "cannot import module 'disc_broken.worse'" in err and "ZeroDivisionError" in err
    assert "bad.py" in err and "worse.py" in err  # the tracebacks point at the failing files
