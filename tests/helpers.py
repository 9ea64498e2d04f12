"""Helpers shared by the test modules: subprocesses with readable failures, virtual
environments, project copies, wheel inspection."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from types import CodeType, FrameType, ModuleType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS_DIR = REPO_ROOT / "tests"
SAMPLE_PROJECTS = TESTS_DIR / "packages"
EXAMPLE_PROJECT = REPO_ROOT / "example_pkg"

#: The torch release the project is developed and tested against; always pinned exactly.
TORCH_PIN = "torch==2.13.0"

#: Build outputs never copied along with a project.
_BUILD_LITTER = ("build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "_aot_build")


class CommandFailed(AssertionError):
    """A subprocess exited with an unexpected status; the message holds its output."""


def describe(proc: subprocess.CompletedProcess[str], seconds: float | None = None) -> str:
    """A readable account of a finished command, its exit status and its whole output."""
    cmd = proc.args if isinstance(proc.args, str) else shlex.join(str(a) for a in proc.args)
    took = f" after {seconds:.1f} s" if seconds is not None else ""
    return (
        f"$ {cmd}\n-> exit status {proc.returncode}{took}\n"
        f"----- stdout -----\n{proc.stdout}\n----- stderr -----\n{proc.stderr}\n------------------"
    )


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` and capture its output.

    With ``check`` (the default) a non-zero exit raises :class:`CommandFailed` whose message
    shows the command, its exit status, stdout and stderr.
    """
    args = [str(c) for c in cmd]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            args,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise CommandFailed(
            f"$ {shlex.join(args)}\n-> timed out after {timeout} s\n"
            f"----- stdout -----\n{out}\n----- stderr -----\n{err}"
        ) from exc
    if check and proc.returncode != 0:
        raise CommandFailed(describe(proc, time.perf_counter() - t0))
    return proc


def existing_find_links() -> str:
    """pip's current find-links (environment first, then pip's configuration)."""
    value = os.environ.get("PIP_FIND_LINKS", "").strip()
    if value:
        return value
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", "global.find-links"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        value = proc.stdout.strip() if proc.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        value = ""
    return value or "/opt/wheels"


def build_env(extra_find_links: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment for pip and ``python -m build``: this process's environment with
    ``extra_find_links`` appended to (never replacing) pip's find-links, so isolated build
    environments keep finding the local torch wheel. Builds compile in one worker process
    (``AOT_BUILD_JOBS=1`` unless ``extra`` sets it): the suite's two xdist workers keep the
    cores busy. Python writes bytecode, as in users' builds (CI sets PYTHONDONTWRITEBYTECODE):
    a build must still leave none in the wheel (test_reproducible_e2e)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["AOT_BUILD_JOBS"] = "1"
    if extra_find_links is not None:
        env["PIP_FIND_LINKS"] = f"{existing_find_links()} {extra_find_links}"
    env.update(extra)
    return env


def copy_project(src: Path, dest: Path) -> Path:
    """Copy a project's sources to ``dest``, leaving build outputs behind."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(*_BUILD_LITTER))
    return dest


@dataclass(frozen=True)
class BuiltDists:
    """What ``python -m build`` made of a project, and its output."""

    sdist: Path | None  # None: the wheel was built from the source tree
    wheel: Path
    log: str


@dataclass(frozen=True)
class Venv:
    """A virtual environment created by :func:`make_venv`."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    def site_packages(self) -> Path:
        found = sorted((self.root / "lib").glob("python3*/site-packages"))
        assert len(found) == 1, f"expected one site-packages in {self.root}, found {found}"
        return found[0]

    def pip_install(
        self, *args: str | os.PathLike[str], env: Mapping[str, str] | None = None, cwd: Path
    ) -> subprocess.CompletedProcess[str]:
        # torch's 1 GB, on a loaded 2-core machine: minutes
        return run([self.python, "-m", "pip", "install", *args], cwd=cwd, env=env, timeout=1500)


def make_venv(root: Path, torch_site: Path | None = None) -> Venv:
    """A fresh virtual environment (with pip) at ``root``, based on this interpreter.

    ``torch_site``: a folder where torch is installed (conftest ``torch_site``), put on the
    environment's path by a ``.pth`` file, as a base image's site-packages would be: pip
    counts torch as installed, and every test environment need not copy its 1 GB."""
    base = getattr(sys, "_base_executable", sys.executable)
    run([base, "-m", "venv", root], cwd=root.parent)
    venv = Venv(root)
    assert venv.python.exists(), f"no interpreter at {venv.python}"
    if torch_site is not None:
        (venv.site_packages() / "torch-site.pth").write_text(f"{torch_site}\n", encoding="utf-8")
    return venv


def sample_dists(project: str, dest: Path, inductor_cache: Path, **env: str) -> BuiltDists:
    """:func:`build_sample` that must succeed: tests/packages/<project>'s wheel, built by a
    real ``python -m build --wheel --no-isolation`` in this (the dev) environment, which holds
    every sample package's build requirements (the isolated path is example_pkg's, conftest
    ``example_dists`` and ``cold_wheels``)."""
    proc, _, out = build_sample(project, dest, inductor_cache, **env)
    if proc.returncode != 0:
        raise CommandFailed(describe(proc))
    (wheel,) = out.glob("*.whl")
    return BuiltDists(None, wheel, proc.stdout + proc.stderr)


def isolated_env(venv: Venv, **extra: str) -> dict[str, str]:
    """A minimal environment for running installed code: PATH holds only the venv's bin
    folder (so no C/C++ compiler is reachable), no PYTHONPATH, HOME kept for pip/torch."""
    env = {
        "PATH": str(venv.bin),
        "HOME": os.environ.get("HOME", str(venv.root)),
        "LANG": "C.UTF-8",
    }
    env.update(extra)
    return env


def run_script(venv: Venv, script: str, tmp_path: Path, **env: str) -> dict[str, Any]:
    """Run ``script`` with ``venv``'s interpreter from a new empty folder under ``tmp_path``,
    no compiler on PATH (:func:`isolated_env`) and an empty TORCHINDUCTOR_CACHE_DIR; return
    the JSON of its last ``RESULT: {...}`` line, with its stderr under ``"stderr"``."""
    work = tmp_path / f"run-{len(list(tmp_path.glob('run-*')))}"
    (work / "inductor").mkdir(parents=True)
    (work / "script.py").write_text(script, encoding="utf-8")
    proc = run(
        [venv.python, work / "script.py"],
        cwd=work,
        env=isolated_env(venv, TORCHINDUCTOR_CACHE_DIR=str(work / "inductor"), **env),
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT: ")]
    assert proc.returncode == 0 and lines, describe(proc)
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT: "))
    result["stderr"] = proc.stderr
    return result


def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def wheel_metadata(wheel: Path) -> tuple[str, list[str]]:
    """The wheel's METADATA text and its ``Requires-Dist`` values."""
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        text = zf.read(name).decode()
    return text, Parser().parsestr(text).get_all("Requires-Dist") or []


def wheel_tags(wheel: Path) -> list[str]:
    """``Tag:`` lines of the wheel's WHEEL file."""
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/WHEEL")]
        text = zf.read(name).decode()
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")]


def wheel_manifest(wheel: Path, package: str, dest: Path) -> Any:
    """The manifest of ``package`` in ``wheel``, read with aot_build's own reader (entries and
    their records) from a copy of its ``_aot_build`` folder extracted under ``dest``."""
    from aot_build.manifest import Manifest

    folder = package.replace(".", "/") + "/_aot_build/"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(dest, [n for n in zf.namelist() if n.startswith(folder)])
    return Manifest.read(dest / folder / "manifest.json")


def file_listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file below ``root`` with its size and modification time (ns)."""
    out: dict[str, tuple[int, int]] = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            st = path.stat()
            out[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def run_traced(fn: Callable[..., Any], code: CodeType, *args: Any, **kwargs: Any) -> tuple[Any, bool]:
    """Call ``fn(*args, **kwargs)`` and report whether Python code ``code`` ran meanwhile.

    For an entry, pass ``entry.__wrapped__.__code__``: False means the compiled artifact
    answered the call, True that the Python function ran (fallback or plain Python).
    """
    hits: list[bool] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is code:
            hits.append(True)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        out = fn(*args, **kwargs)
    finally:
        sys.setprofile(previous)
    return out, bool(hits)


def build_sample(
    project: str, dest: Path, inductor_cache: Path, *options: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """``python -m build --wheel --no-isolation [options]`` of tests/packages/<project>, in a
    copy, with this interpreter (the dev environment has setuptools, torch and aot-build).
    Returns the finished process (whatever its exit status), the project copy and the output
    folder."""
    src = copy_project(SAMPLE_PROJECTS / project, dest / project)
    out = dest / f"{project}-dist"
    proc = run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, *options, "."],
        cwd=src,
        env=build_env(TORCHINDUCTOR_CACHE_DIR=str(inductor_cache), **env),
        check=False,
        timeout=1500,  # one compile worker: the largest sample (31 programs) takes ~10 min
    )
    return proc, src, out


def compile_module_package(
    tmp: Path, package: str, source: str, inductor_cache: Path
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Package ``package`` (its ``__init__.py`` is ``source``) compiled for ``cpu-baseline`` by
    the build's own child process (``python -m aot_build.compile``, this checkout's aot_build)
    under ``tmp``, its artifacts beside it, as a wheel installs them: the folder to put on
    ``sys.path``, and the finished build process."""
    from aot_build.build_config import BuildConfig
    from aot_build.constants import ARTIFACT_DIR
    from aot_build.discover import list_modules

    build_lib = tmp / "build_lib"
    (build_lib / package).mkdir(parents=True)
    (build_lib / package / "__init__.py").write_text(source, encoding="utf-8")
    staging = tmp / "staging"
    staging.mkdir()
    job = BuildConfig(
        build_lib=str(build_lib),
        packages=[package],
        modules=list_modules(build_lib, [package], []),
        targets=["cpu-baseline"],
        out_dir=str(staging),
    )
    config = tmp / "job.json"
    config.write_text(json.dumps(job.to_json()), encoding="utf-8")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(inductor_cache), "PYTHONPATH": str(REPO_ROOT)}
    proc = run([sys.executable, "-m", "aot_build.compile", config], cwd=tmp, env=env, timeout=600)
    shutil.copytree(staging / package / ARTIFACT_DIR, build_lib / package / ARTIFACT_DIR)
    return build_lib, proc


@contextmanager
def imported_fresh(package: str, root: Path, monkeypatch: Any) -> Iterator[ModuleType]:
    """``package`` imported anew from ``root`` (forgotten again after), its manifest read anew:
    each test finds the package as a fresh process would."""
    import importlib

    from aot_build.load import artifacts

    def forget() -> None:
        for name in [n for n in sys.modules if n == package or n.startswith(package + ".")]:
            del sys.modules[name]

    forget()
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(artifacts, "_MANIFESTS", {})
    try:
        yield importlib.import_module(package)
    finally:
        forget()
