"""The C guard evaluator (``_evaluator.c``): compiled into each wheel by the build, loaded by
the shim.

The evaluator is a CPython extension module: it must be compiled for the Python the wheel is
for, which is the Python that builds it (a wheel is tagged for one). The build compiles it
once, with the C compiler Python was built with (``CC``, else ``cc``/``gcc``) against this
Python's headers, and ships it content-named beside the libraries; the manifest names it and
lists its hash, checked before it is loaded, like every artifact. Without it the shim checks
guards with the same program in Python (slower, same results).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..backends import Built

# shlex and sysconfig (0.7 ms) are imported where the build uses them: the shim imports this
# module for load() on an entry's first call.

SOURCE = Path(__file__).with_name("_evaluator.c")
#: The module's name (its init function is ``PyInit__aot_guards``).
MODULE = "_aot_guards"
#: Where the source's path is mapped in the compiled file (reproducible builds).
SOURCE_PREFIX = "/aot-build/guards"


def _getattr_reads() -> dict[Any, tuple[str, ...]]:
    """Python ``__getattr__`` functions whose answer is fixed by dicts the instance holds in
    its own dict, by name: the evaluator stamps those dicts' tags where a name falls to such a
    ``__getattr__`` (``hasattr(self, "offset")`` on an nn.Module), and re-runs the check on
    every call for any other ``__getattr__`` (which may read anything)."""
    import torch

    return {torch.nn.Module.__getattr__: ("_parameters", "_buffers", "_modules")}


class EvaluatorBuildError(RuntimeError):
    """The evaluator could not be compiled; the message says why and what to install."""


def c_compiler() -> list[str]:
    """The C compiler command: ``CC``, else the one Python was built with, else cc/gcc."""
    import shlex
    import sysconfig

    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or ""
    words = shlex.split(cc)
    if words and shutil.which(words[0]):
        return words
    for name in ("cc", "gcc", "clang"):
        if shutil.which(name):
            return [name]
    raise EvaluatorBuildError(
        "no C compiler to build aot_build's guard evaluator (tried $CC, Python's CC, cc, gcc, clang); "
        "install gcc (apt-get install gcc, dnf install gcc) or point CC at a compiler"
    )


def build(
    out_dir: Path,
    cc: list[str] | None = None,
    compile_args: tuple[str, ...] = (),
    link_args: tuple[str, ...] = (),
    strip: str = "strip",
    source: Path = SOURCE,
) -> Path:
    """Compile the evaluator into ``out_dir`` as ``<sha256[:24]>.so``; return its path.
    ``cc``: the C compiler command (default :func:`c_compiler`); ``compile_args`` and
    ``link_args`` go around the source (a manylinux floor's, see
    :func:`aot_build.compile.toolchain.floor_args`); ``strip``: the target's strip tool;
    ``source``: another revision of the evaluator (benchmarks/guard_eval.py).
    EvaluatorBuildError says what is missing (a compiler, Python's headers)."""
    import shlex
    import sysconfig

    include = sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file():
        raise EvaluatorBuildError(
            f"Python's C headers are not installed ({include}/Python.h is missing); aot_build compiles "
            "a small guard evaluator for this Python into the wheel.\n  install them: apt-get install "
            f"python{sys.version_info[0]}.{sys.version_info[1]}-dev (Debian/Ubuntu), dnf install "
            "python3-devel (Fedora/RHEL)"
        )
    cc = cc or c_compiler()
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        staged = Path(tmp) / f"{MODULE}.so"
        cmd = [
            *cc, "-O2", "-shared", "-fPIC", "-fvisibility=hidden", "-std=c11",
            f"-ffile-prefix-map={source.parent}={SOURCE_PREFIX}", f"-I{include}", *compile_args,
            str(source), "-o", str(staged), *link_args,
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise EvaluatorBuildError(
                f"compiling aot_build's guard evaluator failed:\n  $ {shlex.join(cmd)}\n{proc.stderr.strip()}"
            )
        if shutil.which(strip):
            subprocess.run([strip, "--strip-unneeded", str(staged)], check=True)
        data = staged.read_bytes()
        final = out_dir / f"{hashlib.sha256(data).hexdigest()[:24]}.so"
        shutil.move(str(staged), final)
    return final


def build_unit(out_dir: Path, **options: Any) -> Built:
    """:func:`build`, described as a build unit (for the manifest's file list)."""
    from ..backends import Built

    path = build(out_dir, **options)
    data = path.read_bytes()
    return Built(path=path, sha256=hashlib.sha256(data).hexdigest(), size=len(data), isa="")


def load(path: Path) -> Any:
    """Load a compiled evaluator (already checked against its hash); ImportError when this
    process cannot (another Python, a damaged file)."""
    loader = importlib.machinery.ExtensionFileLoader(MODULE, str(path))
    spec = importlib.util.spec_from_file_location(MODULE, str(path), loader=loader)
    if spec is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    setter = getattr(module, "set_getattr_reads", None)  # evaluators built before it: none
    if setter is not None:
        setter(_getattr_reads())
    return module
