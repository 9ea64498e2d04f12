"""Shared fixtures. The expensive ones (wheels, virtual environments) are session-scoped so
that every build and install runs once per test session."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from helpers import (
    EXAMPLE_PROJECT,
    REPO_ROOT,
    TORCH_PIN,
    BuiltDists,
    CommandFailed,
    Venv,
    build_env,
    build_sample,
    copy_project,
    describe,
    make_venv,
    run,
)


@pytest.fixture(scope="session")
def inductor_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TORCHINDUCTOR_CACHE_DIR for every build of the session: kept out of the user's cache,
    and shared so that later builds reuse what earlier ones compiled."""
    return tmp_path_factory.mktemp("inductor-cache")


# ---------------------------------------------------------------- end-to-end fixtures


@pytest.fixture(scope="session")
def e2e_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="session")
def aot_build_wheel(e2e_dir: Path) -> Path:
    """aot-build's own wheel, built from a copy of the repository (isolated build)."""
    src = e2e_dir / "aot-build-src"
    src.mkdir()
    shutil.copy2(REPO_ROOT / "pyproject.toml", src / "pyproject.toml")
    shutil.copytree(REPO_ROOT / "aot_build", src / "aot_build", ignore=shutil.ignore_patterns("__pycache__"))
    for extra in [*REPO_ROOT.glob("README*"), *REPO_ROOT.glob("LICENSE*")]:
        shutil.copy2(extra, src / extra.name)
    out = e2e_dir / "aot-build-wheel"
    run([sys.executable, "-m", "build", "--wheel", "--outdir", out, src], cwd=src, env=build_env())
    (wheel,) = out.glob("aot_build-*.whl")
    return wheel


def isolated_build(project: Path, dest: Path, aot_build_wheel: Path, inductor_cache: Path) -> BuiltDists:
    """A project's sdist and wheel from a real isolated ``python -m build`` (the default: sdist
    first, then the wheel from the sdist), finding aot-build beside the local torch."""
    src = copy_project(project, dest / f"{project.name}-src")
    out = dest / f"{project.name}-dist"
    env = build_env(aot_build_wheel.parent, TORCHINDUCTOR_CACHE_DIR=str(inductor_cache))
    proc = run([sys.executable, "-m", "build", "--outdir", out, "."], cwd=src, env=env, timeout=1500)
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return BuiltDists(sdist, wheel, proc.stdout + proc.stderr)


@pytest.fixture(scope="session")
def example_dists(e2e_dir: Path, aot_build_wheel: Path, inductor_cache: Path) -> BuiltDists:
    """example_pkg's sdist and wheel (isolated build)."""
    return isolated_build(EXAMPLE_PROJECT, e2e_dir, aot_build_wheel, inductor_cache)


@pytest.fixture(scope="session")
def fresh_venv(e2e_dir: Path, aot_build_wheel: Path, example_dists: BuiltDists) -> Venv:
    """A new virtual environment with torch, aot-build and example_pkg installed from wheels."""
    venv = make_venv(e2e_dir / "venv")
    venv.pip_install(
        TORCH_PIN, aot_build_wheel, example_dists.wheel, cwd=e2e_dir, env=build_env(aot_build_wheel.parent)
    )
    return venv


@pytest.fixture(scope="session")
def src_layout_installed(e2e_dir: Path, fresh_venv: Venv, inductor_cache: Path) -> Path:
    """tests/packages/src_layout built without isolation and installed (--no-deps) into the
    fresh environment; returns its wheel.

    Built with two target overrides: ``-C--build-option=--aot-build-targets=cpu-baseline``
    must win over ``AOT_BUILD_TARGETS=cpu-avx2``, which wins over pyproject's ``["cpu"]``."""
    proc, _, out = build_sample(
        "src_layout",
        e2e_dir,
        inductor_cache,
        "-C--build-option=--aot-build-targets=cpu-baseline",
        AOT_BUILD_TARGETS="cpu-avx2",
    )
    if proc.returncode != 0:
        raise CommandFailed(describe(proc))
    (wheel,) = out.glob("srcpkg-*.whl")
    fresh_venv.pip_install("--no-deps", wheel, cwd=e2e_dir)
    return wheel
