"""The ``aoti`` compile rule (the default): AOTInductor on the exported program, shipped as a
bare shared library.

The library is taken out of AOTInductor's .pt2 package and shipped unpacked: loading it with
``AOTIModelContainerRunnerCpu`` is a ``dlopen`` (about a millisecond, no compiler), where
``aoti_load_package`` takes seconds. Build-side imports (Inductor) happen in :meth:`compile`
only: the shim imports this module at run time.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..constants import RULE_AOTI
from ..targets import Target, compile_options
from . import FLAT, Built, CompileRequest

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import torch


def _isa_label(meta: dict[str, Any], target: Target) -> str:
    if target.device == "cuda":
        return f"sm_{meta.get('AOTI_COMPUTE_CAPABILITY', '?')}"
    isa = str(meta.get("AOTI_CPU_ISA", ""))
    return "scalar (no vector ISA)" if isa == "INVALID_VEC_ISA" else isa


def compile_library(
    ep: torch.export.ExportedProgram,
    target: Target,
    extra_options: dict[str, Any],
    workdir: Path,
    strip: bool,
    cxx: str = "",
) -> Built:
    """Compile ``ep`` for ``target`` into ``workdir``; return the library. ``cxx``: the C++
    compiler Inductor calls (the wrapper of :mod:`aot_build.compile.toolchain`); "": a
    wrapper of its own, for the build's manylinux floor."""
    import torch._inductor

    from ..compile.isa import pinned_vec_isa, small_loops_serial
    from ..compile.toolchain import binutil, content_build_id, write_wrapper

    options: dict[str, Any] = {**extra_options, **compile_options(target)}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        if not cxx:  # compiled outside the workers (no wrapper on PATH): one of its own, by path
            name, env = write_wrapper(Path(tmp) / "cxx")
            cxx = str(Path(env["PATH"].split(os.pathsep)[0]) / name)
        options["cpp.cxx"] = (cxx,)
        pt2 = Path(tmp) / "entry.pt2"
        with pinned_vec_isa(target), small_loops_serial():
            torch._inductor.aoti_compile_and_package(ep, package_path=str(pt2), inductor_configs=options)
        with zipfile.ZipFile(pt2) as zf:
            libs = [n for n in zf.namelist() if n.endswith(".so")]
            if len(libs) != 1:
                raise RuntimeError(
                    f"AOTInductor produced {len(libs)} shared libraries ({libs}); the aoti rule "
                    "ships exactly one"
                )
            meta_name = libs[0].removesuffix(".so") + "_metadata.json"
            meta = json.loads(zf.read(meta_name)) if meta_name in zf.namelist() else {}
            staged = Path(tmp) / "lib.so"
            staged.write_bytes(zf.read(libs[0]))
        built_for = str(meta.get("AOTI_COMPUTE_CAPABILITY", ""))
        if target.capability and built_for and built_for != "".join(map(str, target.capability)):
            raise RuntimeError(
                f"the library was compiled for compute capability {built_for}, not {target.name}"
            )
        strip_tool = binutil(cxx, "strip")  # the target's (a cross build's is another)
        if strip and shutil.which(strip_tool):
            subprocess.run([strip_tool, "--strip-unneeded", str(staged)], check=True)
            content_build_id(staged)  # unstripped, symbol names still hold build paths
        data = staged.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        final = workdir / f"{digest[:24]}.so"
        shutil.move(str(staged), final)
    return Built(path=final, sha256=digest, size=len(data), isa=_isa_label(meta, target))


class AotiRule:
    """``aoti``: one stripped shared library per target; loaded by ``dlopen``, no compiler."""

    name = RULE_AOTI
    version = "1"
    convention = FLAT

    def compile(self, request: CompileRequest) -> Built:
        return compile_library(
            request.program, request.target, request.options, request.out_dir, request.strip, request.cxx
        )

    def load(
        self, path: Path, device: str, function: Callable[..., Any]
    ) -> Callable[[Sequence[torch.Tensor]], Sequence[Any]]:
        from ..load import artifacts

        return artifacts.open_library(path, device).run  # type: ignore[no-any-return]
