"""The ``aoti`` compile backend (the default): AOTInductor on the exported program, shipped as
a bare shared library.

The library is taken out of AOTInductor's .pt2 package and shipped unpacked: loading it with
``AOTIModelContainerRunnerCpu`` is a ``dlopen`` (about a millisecond, no compiler), where
``aoti_load_package`` takes seconds. Build-side imports (Inductor, the compiler wrapper, the
ISA pinning, ELF editing) happen in :meth:`compile` only: the shim imports this module at run
time, and only :mod:`.library` is needed there.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...constants import BACKEND_AOTI
from ...targets import Target, compile_options
from .. import FLAT, TRAINING_JOINT, Built, Capabilities, ProgramRequest
from . import library

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import torch


def _isa_label(meta: dict[str, Any], target: Target) -> str:
    if target.device == "cuda":
        return f"sm_{meta.get('AOTI_COMPUTE_CAPABILITY', '?')}"
    isa = str(meta.get("AOTI_CPU_ISA", ""))
    return "scalar (no vector ISA)" if isa == "INVALID_VEC_ISA" else isa


def content_build_id(path: Path) -> None:
    """Replace the library's GNU build ID by a hash of its own content (build ID zeroed).

    The linker hashes its inputs, symbol names and paths of the objects AOTInductor links
    included, so the ID differs between builds even where the stripped library does not; the
    new one is as unique per content, and the same whenever the content is."""
    from ...native.elf import build_id_span  # build side only (as below)

    span = build_id_span(path)
    if span is None:
        return
    offset, length = span
    data = bytearray(path.read_bytes())
    data[offset : offset + length] = bytes(length)
    digest = hashlib.sha1(data, usedforsecurity=False).digest()
    data[offset : offset + length] = (digest * (length // len(digest) + 1))[:length]
    path.write_bytes(bytes(data))


#: Inductor's switch for precompiled headers (its default: on).
PRECOMPILE_HEADERS = "aot_inductor.precompile_headers"
#: Precompile the headers when a build compiles at least this many programs for a target (its
#: worker processes share them).
#: Measured here (2 cores, torch 2.13, a small program): the headers cost about 20 s once and
#: save about 10 s per compile (25 s → 15 s), so they pay off from the third program; a build
#: system's action compiles one. The library is the same either way (same code; the build id
#: and paths are the toolchain wrapper's), and a project's ``inductor-options`` may set it.
HEADERS_FROM = 3


def inductor_config(target: Target, inductor_options: Mapping[str, Any], batch: int) -> dict[str, Any]:
    """Inductor's config for one compile: the project's ``inductor-options``, then the
    target's pins; headers precompiled when ``batch`` (the programs for ``target`` the build
    compiles, whose workers share the headers) reaches :data:`HEADERS_FROM` or they are kept
    for later builds (:func:`aot_build.toolchain.shared_headers`), unless the project says."""
    from ...toolchain import shared_headers

    precompile = batch >= HEADERS_FROM or bool(shared_headers())
    return {PRECOMPILE_HEADERS: precompile, **inductor_options, **compile_options(target)}


def compile_library(
    ep: torch.export.ExportedProgram,
    target: Target,
    inductor_options: Mapping[str, Any],
    workdir: Path,
    strip: bool,
    cxx: str = "",
    batch: int = 1,
) -> Built:
    """Compile ``ep`` for ``target`` into ``workdir``; return the library. ``cxx``: the C++
    compiler Inductor calls (the wrapper of :mod:`aot_build.toolchain`); "": a
    wrapper of its own, for the build's manylinux floor. ``batch``: how many programs for
    ``target`` the build compiles (:data:`HEADERS_FROM`)."""
    # build side only: the shim imports this module at run time
    import torch._inductor

    from ...toolchain import binutil, wrapper_path
    from .isa import pinned_vec_isa, small_loops_serial

    options = inductor_config(target, inductor_options, batch)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        if not cxx:  # compiled outside the workers (no wrapper on PATH): one of its own, by path
            cxx = wrapper_path(Path(tmp) / "cxx")
        options["cpp.cxx"] = (cxx,)
        pt2 = Path(tmp) / "entry.pt2"
        with pinned_vec_isa(target), small_loops_serial():
            torch._inductor.aoti_compile_and_package(ep, package_path=str(pt2), inductor_configs=options)
        with zipfile.ZipFile(pt2) as zf:
            libs = [n for n in zf.namelist() if n.endswith(".so")]
            if len(libs) != 1:
                raise RuntimeError(
                    f"AOTInductor produced {len(libs)} shared libraries ({libs}); the aoti backend "
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


class AotiBackend:
    """``aoti``: one stripped shared library per target; loaded by ``dlopen``, no compiler."""

    name = BACKEND_AOTI
    version = "1"
    convention = FLAT
    capabilities = Capabilities(
        devices=frozenset({"cpu", "cuda"}),
        needs_compiler=True,
        in_process=False,
        cacheable=True,
        native=True,
        training=TRAINING_JOINT,
    )

    def compile(self, request: ProgramRequest) -> Built:
        return compile_library(
            request.program,
            request.target,
            request.config.inductor_options,
            request.out_dir,
            request.config.strip,
            request.cxx,
            request.batch,
        )

    def load(
        self, path: Path, device: str, function: Callable[..., Any]
    ) -> Callable[[Sequence[torch.Tensor]], Sequence[Any]]:
        return library.open_library(path, device).run  # type: ignore[no-any-return]
