"""The program every action of ``aot_build.bzl`` runs (with the interpreter of the repository
rule ``aot_toolchain()``, named by ``--repo_env=AOT_BUILD_PYTHON``): it stages the project,
points every writable location at the action's own scratch folder, and runs one step of
``python -m aot_build``. Every step takes ``--toolchain-id FILE`` (the id ``aot_toolchain()``
computed) and fails when the running toolchain has another.

    aot_action.py export   --scratch S --pyproject F --path REL --src FILE REL ... --entry K
                           --targets T1,T2 --out DIR --unused FILE
    aot_action.py compile  --scratch S --pyproject F --path REL --src FILE REL ... --exported DIR
                           --target T --out DIR --unused FILE
    aot_action.py entries  --scratch S --pyproject F --path REL --src FILE REL ... --expect K ...
                           --listed-in TEXT --out FILE
    aot_action.py assemble --scratch S --checked FILE --exported DIR ... --compiled DIR ...
                           --targets T1,T2 --out DIR
    aot_action.py wheel    --scratch S --pyproject F --src FILE REL ... --artifacts DIR --out DIR
    aot_action.py toolchain-id      # prints this interpreter's toolchain id (what aot_toolchain() stores)

``--unused FILE`` (export, compile) writes the project's Python files the step did not import,
one input path a line: Bazel's ``unused_inputs_list``, so that an edit to a module outside an
entry's import closure reruns neither its export nor its compiles. ``entries`` fails unless the
package's entries are exactly the ``--expect``ed ones (the BUILD file's list), naming each
difference; its output (the list) is an input of ``assemble``.

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
import contextlib
import hashlib
import io
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import NoReturn


def _banner(tool: str) -> str:
    """``tool``'s path on PATH and the first line of its ``--version``."""
    found = shutil.which(tool) or tool
    try:
        out = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = "none"
    return f"{found}\n{''.join(out.splitlines()[:1])}"


def toolchain_id() -> str:
    """A short name of everything besides the inputs that shapes the outputs: Python, torch,
    aot-build (version and build-side sources), the C++ compiler and ``strip``. Cheap (torch is
    located, not imported): every action checks it."""
    import importlib.metadata
    import importlib.util

    import aot_build
    from aot_build.compile.sources import build_side_hash

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        _fail(f"{sys.executable} has no torch installed")
    torch_dir = Path(next(iter(spec.submodule_search_locations)))
    torch_version = importlib.metadata.version("torch")
    parts = [
        sys.version,
        torch_version,
        # torch's git revision and CUDA version
        hashlib.sha256((torch_dir / "version.py").read_bytes()).hexdigest(),
        aot_build.__version__,
        build_side_hash(),
        _banner(os.environ.get("CXX") or "g++"),  # what Inductor uses (torch._inductor.config.cpp.cxx)
        _banner("strip"),
    ]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    return f"py{py}-torch{torch_version}-aot{aot_build.__version__}-{digest}"


def _fail(message: str) -> NoReturn:
    print(f"aot_build (bazel): error: {message}", file=sys.stderr)
    raise SystemExit(1)


def _check_toolchain(id_file: str | None) -> None:
    """The toolchain this action runs with must be the one the build's keys name."""
    if not id_file:
        return
    expected = Path(id_file).read_text(encoding="utf-8").strip()
    actual = toolchain_id()
    if actual != expected:
        _fail(
            f"the toolchain is {actual} ({sys.executable}), but the build's is {expected} (what "
            "the repository rule aot_toolchain() found). Either the interpreter's packages or "
            "the compiler changed since (then run: bazel sync --only=aot_toolchain), or this "
            "machine (a remote worker) has another toolchain than the one the cache entries are "
            "meant for."
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
    The libraries are the same bytes either way (tests/e2e/test_bazel.py compares them with a
    python -m build of the project)."""
    try:
        from torch._inductor import config
    except ImportError:
        return
    aoti = getattr(config, "aot_inductor", None)
    if aoti is not None and hasattr(aoti, "precompile_headers"):
        aoti.precompile_headers = False


def _write_unused(path: str, srcs: list[list[str]], project: Path) -> None:
    """The ``.py`` inputs (as Bazel named them) of modules this process never imported. Any
    other file counts as used: the step may have read it."""
    loaded = {
        os.path.realpath(f)
        for m in list(sys.modules.values())
        if isinstance(f := getattr(m, "__file__", None), str)
    }
    unused = sorted(
        {src for src, rel in srcs if rel.endswith(".py") and os.path.realpath(project / rel) not in loaded}
    )
    Path(path).write_text("".join(f"{u}\n" for u in unused), encoding="utf-8")


def _step(args: list[str]) -> None:
    """``python -m aot_build ARGS`` in this process (its environment already set up)."""
    from aot_build.__main__ import main as aot_build_main

    rc = aot_build_main(args)
    if rc:
        raise SystemExit(rc)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="aot_action.py", fromfile_prefix_chars="@")
    parser.add_argument(
        "command", choices=["entries", "export", "compile", "assemble", "wheel", "toolchain-id"]
    )
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
    parser.add_argument("--unused")
    parser.add_argument("--expect", action="append", default=[])
    parser.add_argument("--listed-in", default="the entries list")
    parser.add_argument("--checked")
    parser.add_argument("--toolchain-id", help="file holding the toolchain id the action's key names")
    a = parser.parse_args(argv)

    if a.command == "toolchain-id":
        print(toolchain_id())
        return
    scratch = _scratch(a.scratch)
    try:
        _check_toolchain(a.toolchain_id)
        out = Path(a.out).absolute()
        if a.command == "assemble":
            if not a.checked or not Path(a.checked).is_file():
                _fail("assemble needs the output of the entries check (--checked FILE)")
            exported = [x for d in a.exported for x in ("--exported", str(Path(d).absolute()))]
            compiled = [x for d in a.compiled for x in ("--compiled", str(Path(d).absolute()))]
            _step(["assemble", *exported, *compiled, "--targets", a.targets, "--out", str(out)])
            return
        project = _stage(scratch, a.src, a.pyproject)
        where = ["--project", str(project), "--path", str(project / a.path)]
        if a.command == "entries":
            expect = [x for k in a.expect for x in ("--expect", k)]
            with contextlib.redirect_stdout(io.StringIO()):  # the list: Bazel shows any output
                _step(["entries", *where, *expect, "--listed-in", a.listed_in])
            out.write_text("".join(f"{k}\n" for k in sorted(a.expect)), encoding="utf-8")
        elif a.command == "export":
            _step(["export", *where, "--entry", a.entry, "--targets", a.targets, "--out", str(out)])
        elif a.command == "compile":
            _no_header_precompiling()
            exported_dir = str(Path(a.exported[0]).absolute())
            _step(["compile", *where, "--exported", exported_dir, "--target", a.target, "--out", str(out)])
        else:
            _wheel(scratch, project, Path(a.artifacts).absolute(), out)
        if a.unused:
            _write_unused(a.unused, a.src, project)
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
