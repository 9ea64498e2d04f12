"""Shared fixtures. The expensive ones (wheels, virtual environments) are session-scoped so
that every build and install runs once per test session."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    EXAMPLE_PROJECT,
    REPO_ROOT,
    SAMPLE_PROJECTS,
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

from aot_build.backends.aoti import PRECOMPILE_HEADERS
from aot_build.build_config import BuildConfig
from aot_build.constants import ARTIFACT_DIR, ENV_HEADERS_DIR, MANIFEST_NAME
from aot_build.discover import list_modules
from aot_build.manifest import Manifest
from aot_build.toolchain import headers_in

#: The suite runs on two pytest-xdist workers (README's test command; ``addopts``). Session
#: fixtures too costly to make twice live on one worker: every test that uses one (the fixture
#: named in :data:`GROUPED`) is in its group, named here (by test file, or file::test). Checked
#: at collection: a test that uses a costly fixture outside its group fails the run, naming the
#: test and this table. (example_pkg's cold builds are made once for the whole run whatever
#: worker asks first: :func:`shared_once`.)
GROUPS = {
    "test_e2e.py": "example_dists",
    "test_manylinux_e2e.py": "example_dists",
    "test_wheels_e2e.py::test_example_wheel_tag_is_what_auditwheel_computes": "example_dists",
    "test_bazel.py": "cold_wheels",
    "test_reproducible_e2e.py": "cold_wheels",
    "test_shim.py": "compiled",
    "test_workers.py": "compiled",
    "test_concurrency.py": "compiled",
}
#: The costly per-worker fixtures, and the group of the tests that may use them.
GROUPED = {"fresh_venv": "example_dists", "compiled": "compiled"}
#: Groups by cost (seconds on the 2-core CI machine, from the last full run's durations), the
#: costliest handed out first; any other test file is a group of its own.
GROUP_COST = {
    # the cold build (two compile workers; example_dists waits for it), Bazel's, the one-entry rebuild
    "cold_wheels": 650,
    # example_pkg's wheel from its sdist (from the cold build's cache), the installed checks
    "example_dists": 600,
    "test_signatures_e2e.py": 600,
    "compiled": 330,
    "test_inplace_e2e.py": 300,
    "test_hf_e2e.py": 250,
    "test_training_e2e.py": 250,
    "test_targets_e2e.py": 190,
    "test_joint.py": 170,
    "test_wheels_e2e.py": 170,
    "test_rules_e2e.py": 120,
    "test_state_e2e.py": 110,
    "test_cache.py": 90,
    "test_bad_inputs.py": 70,
    "test_dynamo_rule.py": 40,
    "test_inplace.py": 40,
    "test_sdpa_e2e.py": 30,
}
#: Every test below this folder is marked ``e2e`` (:func:`pytest_collection_modifyitems`), and
#: no other test is: README's fast command runs ``tests/unit``.
E2E_DIR = Path(__file__).parent / "e2e"


def group_of(nodeid: str) -> str:
    """The xdist group of a test, from its id alone (the xdist controller collects nothing)."""
    path, _, rest = nodeid.partition("::")
    file = path.rsplit("/", 1)[-1]
    test = rest.split("[", 1)[0]
    return GROUPS.get(f"{file}::{test}") or GROUPS.get(file) or file


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Scopes are :func:`group_of`'s groups, handed out in collection order. (xdist 3.8's own
    ``loadgroup`` does not group under pytest 9.2: it rewrites ``item._nodeid``, which pytest
    no longer reads.)"""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return GroupScheduling(config, log)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by the marks set here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`E2E_DIR` ``e2e``; check :data:`GROUPS` (each key names a test
    file, each costly fixture is used in its group only); the costliest groups first."""
    wrong = [f"{key}: no such test file under tests/" for key in [*GROUPS, *GROUP_COST] if stale(key)]
    for item in items:
        if item.path.is_relative_to(E2E_DIR):
            item.add_marker(pytest.mark.e2e)
        elif item.get_closest_marker("e2e"):
            wrong.append(f"{item.nodeid} is marked e2e outside tests/e2e/: move its file there")
        names = getattr(item, "fixturenames", ())
        for fixture, group in GROUPED.items():
            if fixture in names and group_of(item.nodeid) != group:
                wrong.append(f"{item.nodeid} uses {fixture}: add its file (or file::test) to group {group}")
    if wrong:
        raise pytest.UsageError(
            "tests/conftest.py GROUPS: " + "; ".join(wrong) + " (a costly fixture used outside its group "
            "is made again by every xdist worker that runs it)"
        )
    items.sort(key=lambda item: -GROUP_COST.get(group_of(item.nodeid), 0))


def stale(key: str) -> bool:
    """Whether a :data:`GROUPS` or :data:`GROUP_COST` key names a test file that is not there
    (group names that are no file name pass)."""
    file = key.partition("::")[0]
    here = Path(__file__).parent
    return file.startswith("test_") and not [*here.glob(file), *here.glob(f"*/{file}")]


def shared_folder(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """The folder ``name`` common to the run's xdist workers (:func:`shared_once` makes it)."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / name


def shared_once(tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """``make(folder)`` once for the whole test run, even across xdist workers (a file lock
    in their common temporary folder); the folder after it is made."""
    folder = shared_folder(tmp_path_factory, name)
    root = folder.parent
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / ".done").exists():
            shutil.rmtree(folder, ignore_errors=True)
            make(folder)
            (folder / ".done").touch()
    return folder


@pytest.fixture(scope="session")
def torch_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding torch (the dev environment's: the local pin) and its requirements, as
    links into the dev environment's site-packages: shared read-only by the test environments
    of :func:`venv_factory` (``helpers.make_venv``'s ``torch_site``); pip sees torch installed
    there. (A pip install of torch's 1 GB per environment took minutes on a loaded CI machine.)"""
    return shared_once(tmp_path_factory, "torch-site", link_installed("torch"))


def link_installed(name: str) -> Callable[[Path], None]:
    """``make(folder)``: links in ``folder`` to the installed files of distribution ``name``
    and of everything it requires (extras aside), as they are in this environment."""
    from importlib.metadata import distribution

    from packaging.requirements import Requirement

    def make(folder: Path) -> None:
        folder.mkdir()
        todo, seen = [name], set()
        while todo:
            dist = distribution(todo.pop())
            key = dist.metadata["Name"].lower().replace("_", "-")
            if key in seen:
                continue
            seen.add(key)
            site = Path(str(dist.locate_file("")))
            tops = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
            for top in tops - {"__pycache__"}:
                if not top.endswith(".pth") and not (folder / top).exists():
                    (folder / top).symlink_to(site / top)
            for text in dist.requires or ():
                req = Requirement(text)
                if req.marker is None or req.marker.evaluate({"extra": ""}):
                    todo.append(req.name)

    return make


@pytest.fixture(scope="session")
def venv_factory(e2e_dir: Path, aot_build_wheel: Path, torch_site: Path) -> Callable[..., Venv]:
    """``make(name, *requirements)``: a new environment under the session's e2e folder with
    the shared torch (:func:`torch_site`), aot-build's wheel and ``requirements`` (wheels
    under test, pins) installed by pip, finding the local torch and aot-build."""

    def make(name: str, *requirements: str | Path) -> Venv:
        venv = make_venv(e2e_dir / name, torch_site)
        venv.pip_install(aot_build_wheel, *requirements, cwd=e2e_dir, env=build_env(aot_build_wheel.parent))
        return venv

    return make


@pytest.fixture(scope="session", autouse=True)
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """aot-build's build cache for every build of the session: never the user's
    ~/.cache/aot-build (builds inherit the variable)."""
    path = tmp_path_factory.mktemp("aot-build-cache")
    old = os.environ.get("AOT_BUILD_CACHE_DIR")
    os.environ["AOT_BUILD_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("AOT_BUILD_CACHE_DIR", None)
    else:
        os.environ["AOT_BUILD_CACHE_DIR"] = old


@pytest.fixture(scope="session", autouse=True)
def inductor_headers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Inductor's precompiled headers: one folder for the whole run (both xdist workers),
    never the machine's temp folder. This process's compiles keep theirs there, and so do the
    builds it starts (``AOT_BUILD_HEADERS_DIR``, inherited), which all use the dev
    environment's torch and so share them; the builds that users' defaults must show keep
    theirs in their own work folder (:func:`cold_build`, :func:`isolated_build`,
    :func:`compiled`: :func:`own_headers`)."""
    folder = shared_folder(tmp_path_factory, "inductor-headers")
    folder.mkdir(exist_ok=True)
    old = os.environ.get(ENV_HEADERS_DIR)
    os.environ[ENV_HEADERS_DIR] = str(folder)
    with headers_in(str(folder)):
        yield
    if old is None:
        os.environ.pop(ENV_HEADERS_DIR, None)
    else:
        os.environ[ENV_HEADERS_DIR] = old


def own_headers(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a build that keeps its precompiled headers in its own work folder, as a
    user's build does (no ``AOT_BUILD_HEADERS_DIR``)."""
    return {k: v for k, v in env.items() if k != ENV_HEADERS_DIR}


@pytest.fixture(scope="session")
def inductor_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """TORCHINDUCTOR_CACHE_DIR for every build of the session: kept out of the user's cache,
    and shared so that later builds reuse what earlier ones compiled."""
    return tmp_path_factory.mktemp("inductor-cache")


# ---------------------------------------------------------------- a compiled package, no wheel

PKG = "shim_pkg"
#: Cross-built on this one machine; the vector ISA of each is pinned, whatever the host has.
SHIM_CPU_TARGETS = ("cpu-avx512", "cpu-avx2", "cpu-baseline")


@dataclass(frozen=True)
class Compiled:
    root: Path  # holds shim_pkg/ with its _aot_build/ folder, as site-packages would
    log: str
    temp_left: list[str]  # what the build left in its TMPDIR (its own, empty before)

    @property
    def artifact_dir(self) -> Path:
        return self.root / PKG / ARTIFACT_DIR

    def manifest(self) -> Manifest:
        return Manifest.read(self.artifact_dir / MANIFEST_NAME)


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory, inductor_cache: Path) -> Compiled:
    tmp = tmp_path_factory.mktemp("shim-compile")
    build_lib = tmp / "build_lib"
    shutil.copytree(SAMPLE_PROJECTS / "shim_pkg", build_lib, ignore=shutil.ignore_patterns("__pycache__"))
    staging = tmp / "staging"
    staging.mkdir()
    job = BuildConfig(
        build_lib=str(build_lib),
        packages=[PKG],
        modules=list_modules(build_lib, [PKG], []),
        targets=list(SHIM_CPU_TARGETS),
        out_dir=str(staging),
        # headers precompiled although each worker compiles one program per target (the
        # project's say wins): test_workers checks that they leave nothing in TMPDIR
        inductor_options={PRECOMPILE_HEADERS: True},
    )
    config = tmp / "job.json"
    config.write_text(json.dumps(job.to_json()), encoding="utf-8")
    temp = tmp / "tmpdir"
    temp.mkdir()
    env = own_headers({**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache), "TMPDIR": str(temp)})
    proc = run([sys.executable, "-m", "aot_build.compile", config], cwd=tmp, env=env, timeout=900)
    left = sorted(str(p.relative_to(temp)) for p in temp.rglob("*"))
    # the driver writes only into its staging folder
    assert not (build_lib / PKG / ARTIFACT_DIR).exists()
    shutil.copytree(staging / PKG / ARTIFACT_DIR, build_lib / PKG / ARTIFACT_DIR)
    return Compiled(build_lib, proc.stdout + proc.stderr, left)


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
    """A project's wheel from a real isolated ``python -m build --wheel`` of its source tree,
    finding aot-build beside the local torch (example_pkg's wheel from its sdist:
    :func:`example_dists`)."""
    src = copy_project(project, dest / f"{project.name}-src")
    out = dest / f"{project.name}-dist"
    env = own_headers(build_env(aot_build_wheel.parent, TORCHINDUCTOR_CACHE_DIR=str(inductor_cache)))
    proc = run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", out, "."], cwd=src, env=env, timeout=1500
    )
    (wheel,) = out.glob("*.whl")
    return BuiltDists(None, wheel, proc.stdout + proc.stderr)


#: The cold builds' SOURCE_DATE_EPOCH: the Bazel rules' default (rules/aot_build.bzl), so
#: test_bazel compares its wheel with them; and the targets rules/example builds.
COLD_EPOCH = "315532800"
COLD_TARGETS = "cpu-avx2,cpu-baseline"


def cold_build(
    root: Path,
    aot_build_wheel: Path,
    inductor_cache: str,
    jobs: str = "",
    isolated: bool = True,
    via_sdist: bool = False,
) -> BuiltDists:
    """A real isolated ``python -m build --wheel`` of ``root/example_pkg`` with the build
    cache ``root/aot-build-cache``, COLD_EPOCH and COLD_TARGETS, and setuptools pinned to this
    environment's (its version is written into the wheel; test_bazel's wheel is built with
    this environment's). ``isolated=False``: ``--no-isolation`` in this (the dev) environment,
    whose torch and aot-build are at other paths than an isolated build's. ``via_sdist``: the
    sdist, then the wheel from it in a temporary folder (``python -m build``'s default)."""
    from importlib.metadata import version

    pins = root.parent / f"{root.name}-constraints.txt"
    pins.write_text(f"setuptools=={version('setuptools')}\n", encoding="utf-8")
    env = build_env(
        aot_build_wheel.parent,
        SOURCE_DATE_EPOCH=COLD_EPOCH,
        AOT_BUILD_TARGETS=COLD_TARGETS,
        AOT_BUILD_CACHE_DIR=str(root / "aot-build-cache"),
        TORCHINDUCTOR_CACHE_DIR=str(root / inductor_cache),
        PIP_CONSTRAINT=str(pins),
        **({"AOT_BUILD_JOBS": jobs} if jobs else {}),
    )
    if isolated:  # as users build: the headers in the build's own folder
        env = own_headers(env)
    out = root / f"dist-{inductor_cache}"
    what = [] if via_sdist else ["--wheel"]
    isolation = [] if isolated else ["--no-isolation"]
    cmd = [sys.executable, "-m", "build", *what, *isolation, "--outdir", out, "."]
    proc = run(cmd, cwd=root / "example_pkg", env=env, timeout=1800)
    (wheel,) = out.glob("*.whl")
    sdists = list(out.glob("*.tar.gz"))
    assert len(sdists) == via_sdist, sdists
    return BuiltDists(sdists[0] if sdists else None, wheel, proc.stdout + proc.stderr)


def _shared_build(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], BuiltDists]
) -> BuiltDists:
    """``build(root)`` of example_pkg copied into ``root/example_pkg`` (:func:`cold_build`),
    made once for the whole run (:func:`shared_once`) in the common folder ``name``."""

    def make(root: Path) -> None:
        copy_project(EXAMPLE_PROJECT, root / "example_pkg")
        (root / "build.log").write_text(build(root).log, encoding="utf-8")

    root = shared_once(tmp_path_factory, name, make)
    out = root / "dist-inductor-cache"
    sdists = list(out.glob("*.tar.gz"))
    (wheel,) = out.glob("*.whl")
    return BuiltDists(sdists[0] if sdists else None, wheel, (root / "build.log").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def cold_wheel(tmp_path_factory: pytest.TempPathFactory, aot_build_wheel: Path) -> BuiltDists:
    """The cold build (:func:`cold_build`) of example_pkg from its source folder, with empty
    aot-build and Inductor caches (so everything compiles, in two workers); made once for the
    whole run (its build cache warms :func:`example_dists`'s). Its folder is read-only to
    tests: one that edits the project copies it (``cold_root``)."""
    return _shared_build(
        tmp_path_factory, "cold-a", lambda root: cold_build(root, aot_build_wheel, "inductor-cache", jobs="2")
    )


def cold_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of :func:`cold_wheel` (its project copy and its build cache), once built."""
    return shared_folder(tmp_path_factory, "cold-a")


@pytest.fixture(scope="session")
def example_dists(
    tmp_path_factory: pytest.TempPathFactory, aot_build_wheel: Path, cold_wheel: BuiltDists
) -> BuiltDists:
    """example_pkg's sdist and wheel, the wheel from the sdist as users build it, in other
    folders and build environments than :func:`cold_wheel`'s, from a copy of its build cache:
    every program a cache hit (the cold builds that must compile are :func:`cold_wheel` and
    test_bazel's). Made once for the whole run (:func:`shared_once`: two groups use it)."""

    def build(root: Path) -> BuiltDists:
        shutil.copytree(cold_root(tmp_path_factory) / "aot-build-cache", root / "aot-build-cache")
        return cold_build(root, aot_build_wheel, "inductor-cache", via_sdist=True)

    return _shared_build(tmp_path_factory, "cold-b", build)


@pytest.fixture(scope="session")
def cold_wheels(cold_wheel: BuiltDists, example_dists: BuiltDists) -> tuple[BuiltDists, BuiltDists]:
    """example_pkg's wheel from the source folder, cold, and from the sdist (conftest
    ``example_dists``) in other folders and build environments, from its build cache."""
    return cold_wheel, example_dists


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
