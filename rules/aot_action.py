"""The program every action of ``aot_build.bzl`` runs (with the interpreter given by
``--define=AOT_BUILD_PYTHON``): it stages the project, points every writable location at
the action's own scratch folder, and runs one step of ``python -m aot_build``.

    aot_action.py export   --scratch S --pyproject F --path REL --src FILE REL ... --entry K
                           --targets T1,T2 --out DIR
    aot_action.py compile  --scratch S --pyproject F --path REL --src FILE REL ... --exported DIR
                           --target T --out DIR
    aot_action.py assemble --scratch S --exported DIR ... --compiled DIR ... --targets T1,T2 --out DIR
    aot_action.py wheel    --scratch S --pyproject F --src FILE REL ... --artifacts DIR --out DIR
    aot_action.py toolchain-id      # prints the value for --define=AOT_BUILD_TOOLCHAIN

Everything it reads is a declared input (the project's files, earlier steps' outputs) or the
toolchain (this interpreter with torch and aot-build, the C++ compiler and binutils on PATH);
everything it writes is the declared output or the scratch folder, which it removes. HOME,
TMPDIR, XDG_CACHE_HOME and TORCHINDUCTOR_CACHE_DIR point into the scratch folder, so nothing
lands in /tmp or in a user's cache, whatever the sandbox allows.

The steps run in this process (``aot_build.__main__.main``), after the environment is set:
torch reads TMPDIR and TORCHINDUCTOR_CACHE_DIR when it is imported. The wheel step runs
``python -m build`` as a child process and prints its output only when it fails.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

#: Set by the rules (part of every action's key) when --define=AOT_BUILD_TOOLCHAIN is given.
ENV_TOOLCHAIN = "AOT_BUILD_TOOLCHAIN_ID"


def toolchain_id() -> str:
    """A short name of everything besides the inputs that shapes the outputs: Python, torch,
    aot-build (version and build-side sources), the C++ compiler and ``strip``."""
    import torch

    import aot_build
    from aot_build.compile.cache import compiler_identity
    from aot_build.compile.sources import build_side_hash

    strip = shutil.which("strip") or "strip"
    try:
        strip_banner = subprocess.run(
            [strip, "--version"], capture_output=True, text=True, timeout=60
        ).stdout.splitlines()[:1]
    except (OSError, subprocess.SubprocessError):
        strip_banner = ["none"]
    parts = [
        sys.version,
        torch.__version__,
        str(getattr(torch.version, "git_version", "")),
        aot_build.__version__,
        build_side_hash(),
        compiler_identity(),
        f"{strip}\n{''.join(strip_banner)}",
    ]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    return f"py{py}-torch{torch.__version__}-aot{aot_build.__version__}-{digest}"


def _fail(message: str) -> None:
    print(f"aot_build (bazel): error: {message}", file=sys.stderr)
    raise SystemExit(1)


def _check_toolchain() -> None:
    expected = os.environ.get(ENV_TOOLCHAIN, "")
    if not expected:
        return
    actual = toolchain_id()
    if actual != expected:
        _fail(
            f"--define=AOT_BUILD_TOOLCHAIN={expected}, but this machine's toolchain "
            f"({sys.executable}) is {actual}. Either it changed (then update the define, e.g. "
            f"in .bazelrc: build --define=AOT_BUILD_TOOLCHAIN={actual}) or this worker has a "
            "different torch/aot-build/compiler than the one the cache entries are meant for."
        )


def _scratch(path: str) -> Path:
    """A fresh scratch folder with HOME, TMPDIR and the caches pointing into it."""
    scratch = Path(path).absolute()
    if scratch.exists():  # left over by an interrupted local (unsandboxed) run
        shutil.rmtree(scratch)
    for sub in ("home", "tmp", "cache", "inductor"):
        (scratch / sub).mkdir(parents=True)
    os.environ.update(
        HOME=str(scratch / "home"),
        TMPDIR=str(scratch / "tmp"),
        XDG_CACHE_HOME=str(scratch / "cache"),
        TORCHINDUCTOR_CACHE_DIR=str(scratch / "inductor"),
        TRITON_CACHE_DIR=str(scratch / "cache" / "triton"),
        AOT_BUILD_CACHE_DIR=str(scratch / "cache" / "aot-build"),
    )
    return scratch


def _stage(scratch: Path, srcs: list[list[str]], pyproject: str) -> Path:
    """Copy the project's files (FILE, path relative to the project) into ``scratch/project``:
    one layout whatever Bazel's (sandbox, external repository, generated files), a writable
    tree for setuptools, and modes that do not depend on how the inputs were materialized."""
    project = scratch / "project"
    project.mkdir()
    for src, rel in [*srcs, [pyproject, "pyproject.toml"]]:
        dest = project / rel
        if dest.exists():
            continue  # listed twice (e.g. pyproject.toml also in srcs)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        executable = os.stat(src).st_mode & stat.S_IXUSR
        dest.chmod(0o755 if executable else 0o644)
    return project


def _no_header_precompiling() -> None:
    """Turn off AOTInductor's precompiled headers for this process. Inductor keeps them in
    TMPDIR/torchinductor_<user>/precompiled_headers, shared by every build on a machine; an
    action's TMPDIR is its own scratch folder, so each compile action would build them (about
    140 MB per vector ISA) only to throw them away: 30 s instead of 18 s for a small entry.
    The libraries are the same bytes either way (tests/test_bazel.py compares them with a
    python -m build of the project)."""
    try:
        from torch._inductor import config
    except ImportError:
        return
    aoti = getattr(config, "aot_inductor", None)
    if aoti is not None and hasattr(aoti, "precompile_headers"):
        aoti.precompile_headers = False


def _step(args: list[str]) -> None:
    """``python -m aot_build ARGS`` in this process (its environment already set up)."""
    from aot_build.__main__ import main as aot_build_main

    rc = aot_build_main(args)
    if rc:
        raise SystemExit(rc)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="aot_action.py", fromfile_prefix_chars="@")
    parser.add_argument("command", choices=["export", "compile", "assemble", "wheel", "toolchain-id"])
    parser.add_argument("--scratch")
    parser.add_argument("--pyproject")
    parser.add_argument("--path", default=".")
    parser.add_argument("--src", nargs=2, action="append", default=[], metavar=("FILE", "REL"))
    parser.add_argument("--entry")
    parser.add_argument("--targets")
    parser.add_argument("--target")
    parser.add_argument("--exported", action="append", default=[])
    parser.add_argument("--compiled", action="append", default=[])
    parser.add_argument("--artifacts")
    parser.add_argument("--out")
    a = parser.parse_args(argv)

    if a.command == "toolchain-id":
        print(toolchain_id())
        return
    scratch = _scratch(a.scratch)
    try:
        _check_toolchain()
        out = Path(a.out).absolute()
        if a.command == "assemble":
            exported = [x for d in a.exported for x in ("--exported", str(Path(d).absolute()))]
            compiled = [x for d in a.compiled for x in ("--compiled", str(Path(d).absolute()))]
            _step(["assemble", *exported, *compiled, "--targets", a.targets, "--out", str(out)])
            return
        project = _stage(scratch, a.src, a.pyproject)
        where = ["--project", str(project), "--path", str(project / a.path)]
        if a.command == "export":
            _step(["export", *where, "--entry", a.entry, "--targets", a.targets, "--out", str(out)])
        elif a.command == "compile":
            _no_header_precompiling()
            exported_dir = str(Path(a.exported[0]).absolute())
            _step(["compile", *where, "--exported", exported_dir, "--target", a.target, "--out", str(out)])
        else:
            _wheel(scratch, project, Path(a.artifacts).absolute(), out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _wheel(scratch: Path, project: Path, artifacts: Path, out: Path) -> None:
    """``python -m build --wheel --no-isolation`` of the staged project, shipping the assembled
    artifacts (AOT_BUILD_PREBUILT) instead of compiling; the one wheel lands in ``out``."""
    dist = scratch / "dist"
    # A copy with plain files: a sandbox gives inputs as symlinks, and aot-build accepts
    # prebuilt artifacts only as regular files.
    prebuilt = scratch / "prebuilt"
    shutil.copytree(artifacts, prebuilt, symlinks=False)
    env = {**os.environ, "AOT_BUILD_PREBUILT": str(prebuilt)}
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(project)],
        cwd=scratch,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if proc.returncode != 0:  # quiet when it works: Bazel shows any output of an action
        print(proc.stdout, file=sys.stderr)
        _fail(f"python -m build --wheel failed (exit status {proc.returncode}); its output is above")
    wheels = sorted(dist.glob("*.whl"))
    if len(wheels) != 1:
        _fail(f"python -m build wrote {[w.name for w in wheels]}, expected one wheel")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(wheels[0], out / wheels[0].name)


if __name__ == "__main__":
    main()
