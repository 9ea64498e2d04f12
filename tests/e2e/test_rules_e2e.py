"""A compile backend from another distribution, end to end: the plugin's wheel registers the
backend ``exported`` in the ``aot_build.backends`` entry point group; a project selects it with
``[tool.aot-build] backend`` (and ``aoti`` for one entry); a real isolated ``python -m build``
finds it in the build environment; the installed wheel runs with it, and without it falls
back naming the missing backend. (The group's old name: tests/test_rules.py.)
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import isolated_build
from helpers import (
    SAMPLE_PROJECTS,
    Venv,
    build_env,
    isolated_env,
    run,
    run_script,
    wheel_manifest,
    wheel_names,
)

CHECK = r"""
import json, sys, warnings
import torch
import rule_user_pkg as pkg
from rule_user_pkg import head, scores

ran = []
def profile(frame, event, arg):
    if event == "call" and frame.f_code in (head.__wrapped__.__code__, scores.__wrapped__.__code__):
        ran.append(frame.f_code.co_name)

torch.manual_seed(1)
facts = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name, entry, batch in (("head", head, 5), ("head", head, 40), ("scores", scores, 8)):
        x = torch.randn(batch, 16)
        sys.setprofile(profile)
        try:
            with torch.no_grad():
                out = entry(x)
        finally:
            sys.setprofile(None)
        want = entry.__wrapped__(x)
        facts[f"{name}-{batch}"] = {
            "equal": bool(torch.allclose(out, want, rtol=1e-5, atol=1e-6)),
            "ran_python": name in ran,
        }
        ran.clear()
    with torch.no_grad():  # new weights after import: both backends compute with them
        for p in pkg.MODEL.parameters():
            p.mul_(-0.5)
    x = torch.randn(6, 16)
    with torch.no_grad():
        facts["new-weights"] = bool(torch.allclose(head(x), head.__wrapped__(x), rtol=1e-5, atol=1e-6))
try:
    import exported_rule
    facts["loaded"] = exported_rule.LOADED
except ImportError:
    facts["loaded"] = None
facts["warnings"] = [str(w.message) for w in caught if w.category.__name__ == "FallbackWarning"]
print("RESULT: " + json.dumps(facts))
"""


@pytest.fixture(scope="module")
def links(e2e_dir: Path, aot_build_wheel: Path) -> Path:
    """A find-links folder holding aot-build's wheel and the plugin's (built for real)."""
    folder = e2e_dir / "rule-links"
    folder.mkdir()
    shutil.copy2(aot_build_wheel, folder)
    src = e2e_dir / "rule-plugin-src"
    shutil.copytree(SAMPLE_PROJECTS / "rule_plugin", src)
    run([sys.executable, "-m", "build", "--wheel", "--outdir", folder, src], cwd=src, env=build_env())
    return folder


@pytest.fixture(scope="module")
def user_wheel(e2e_dir: Path, links: Path, aot_build_wheel: Path, inductor_cache: Path) -> tuple[Path, str]:
    # the isolated build finds aot-build and the plugin in `links` and installs both
    wheel = links / aot_build_wheel.name
    dists = isolated_build(SAMPLE_PROJECTS / "rule_user", e2e_dir, wheel, inductor_cache)
    return dists.wheel, dists.log


@pytest.fixture(scope="module")
def venv(venv_factory: Callable[..., Venv], links: Path, user_wheel: tuple[Path, str]) -> Venv:
    """A new environment with the plugin and the project (the last test here uninstalls the
    plugin again)."""
    (plugin,) = links.glob("aot_build_rule_exported-*.whl")
    return venv_factory("rules-venv", plugin, user_wheel[0])


STRICT_CALL = "import torch, rule_user_pkg as p\nwith torch.no_grad(): p.head(torch.randn(4, 16))"


def test_manifest_records_each_entrys_rule(user_wheel: tuple[Path, str], tmp_path: Path) -> None:
    wheel, log = user_wheel
    names = wheel_names(wheel)
    manifest = wheel_manifest(wheel, "rule_user_pkg", tmp_path)
    backends = {
        key: {(a.backend, a.backend_version, Path(a.file).suffix) for v in e.variants for a in v.artifacts}
        for key, e in manifest.entries.items()
    }
    assert backends == {
        "rule_user_pkg:head": {("exported", "1", ".pt2")},
        "rule_user_pkg:scores": {("aoti", "1", ".so")},
    }
    assert all(f"rule_user_pkg/_aot_build/{f}" in names for f in manifest.files)
    assert "[cpu-baseline] compiled" in log


def test_installed_rule_serves_calls(venv: Venv, tmp_path: Path) -> None:
    facts = run_script(venv, CHECK, tmp_path, AOT_BUILD_STRICT="1")
    for call in ("head-5", "head-40", "scores-8"):
        assert facts[call] == {"equal": True, "ran_python": False}, (call, facts)
    assert facts["new-weights"] is True
    assert facts["warnings"] == []
    assert len(facts["loaded"]) == 1 and facts["loaded"][0].endswith(".pt2")  # the plugin loaded `head`


def test_missing_rule_falls_back_naming_it(venv: Venv, tmp_path: Path, e2e_dir: Path) -> None:
    run([venv.python, "-m", "pip", "uninstall", "-y", "aot-build-rule-exported"], cwd=e2e_dir)
    facts = run_script(venv, CHECK, tmp_path)
    assert facts["loaded"] is None
    assert facts["head-5"] == {"equal": True, "ran_python": True}
    assert facts["scores-8"] == {"equal": True, "ran_python": False}  # aoti entries are unaffected
    (msg,) = facts["warnings"]  # one warning per entry and reason
    assert msg.startswith("aot_build: rule_user_pkg:head runs as plain Python: ")
    assert "compile backend 'exported'" in msg and "no compile backend 'exported' is installed" in msg
    assert "'aot_build.backends'" in msg
    strict = run(
        [venv.python, "-c", STRICT_CALL],
        cwd=tmp_path,
        env=isolated_env(venv, AOT_BUILD_STRICT="1"),
        check=False,
    )
    assert strict.returncode != 0 and "FallbackError" in strict.stderr
    assert "no compile backend 'exported' is installed" in strict.stderr
