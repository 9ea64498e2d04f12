"""Pin the vector ISA Inductor compiles for, whatever CPU the build runs on (and keep small
loops serial, see :func:`small_loops_serial`).

Inductor picks the best ISA of the build host (AVX-512 with VNNI, BF16 or AMX where present)
and adds its flags to the compiler command line; ``cpp.simdlen`` only chooses among those
the host offers. A shipped library must hold only what its target guarantees, so while a
target compiles, Inductor's list of valid ISAs is replaced by exactly the target's one:
``cpu-avx512`` gets AVX-512 F/BW/DQ/VL (torch's own AVX512 level: no VNNI, BF16, AMX),
``cpu-avx2`` AVX2+FMA, ``cpu-baseline`` none (scalar code, SSE2 at most). On aarch64,
``cpu-neon`` gets NEON (128-bit ASIMD, never SVE whatever the build host has) and
``cpu-baseline`` none; other architectures have only ``cpu-baseline`` (Inductor would pick
SVE/VSX from the build host).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ...targets import Target, machine


def _portable_isa(name: str) -> Any:
    from torch._inductor import cpu_vec_isa

    if name == "cpu-avx512":

        class PortableAVX512(cpu_vec_isa.VecAVX512):  # type: ignore[misc, valid-type]
            """AVX-512 without the extensions the build host happens to have."""

            def __bool__(self) -> bool:  # type: ignore[override]
                return True

            def build_arch_flags(self) -> str:
                return str(self._arch_flags)

        return PortableAVX512()
    if name == "cpu-avx2":

        class PortableAVX2(cpu_vec_isa.VecAVX2):  # type: ignore[misc, valid-type]
            def __bool__(self) -> bool:  # type: ignore[override]
                return True

        return PortableAVX2()
    if name == "cpu-neon":

        class PortableNEON(cpu_vec_isa.VecNEON):  # type: ignore[misc, valid-type]
            """NEON, without probing the build host (which may be another architecture)."""

            def __bool__(self) -> bool:  # type: ignore[override]
                return True

        return PortableNEON()
    return None


@contextlib.contextmanager
def pinned_vec_isa(target: Target) -> Iterator[None]:
    """While active, Inductor compiles CPU code for exactly ``target``'s vector ISA. A CUDA
    target's host code gets none: it runs on whatever CPU drives the GPU."""
    from torch._inductor import cpu_vec_isa

    name = target.name if target.device == "cpu" else "cpu-baseline"
    isa = _portable_isa(name) if machine() in ("x86_64", "aarch64") else None
    original = cpu_vec_isa.valid_vec_isa_list
    cpu_vec_isa.valid_vec_isa_list = lambda: [isa] if isa is not None else []  # type: ignore[assignment]
    try:
        yield
    finally:
        cpu_vec_isa.valid_vec_isa_list = original  # type: ignore[assignment]


@contextlib.contextmanager
def small_loops_serial() -> Iterator[None]:
    """While active, Inductor leaves a loop nest too small to split across threads serial.

    CPU targets are built with ``cpp.dynamic_threads`` (see ``targets.CPU_THREAD_OPTIONS``),
    under which Inductor opens an OpenMP region for *every* loop nest, however small ("let
    the runtime decide"). A compiled call would then enter OpenMP on every kernel: a cost per
    call, and a hang in a process forked after its parent used OpenMP (a multiprocessing fork
    pool), where eager torch runs such small ops serially. The depth is decided as without
    dynamic threads; the regions that remain still size their buffers at run time."""
    from torch._inductor import config
    from torch._inductor.codegen.cpp import CppKernel

    original = CppKernel.decide_parallel_depth

    def decide(self: Any, max_parallel_depth: Any, threads: int) -> Any:
        with config.patch({"cpp.dynamic_threads": False}):
            return original(self, max_parallel_depth, threads)

    CppKernel.decide_parallel_depth = decide  # type: ignore[method-assign]
    try:
        yield
    finally:
        CppKernel.decide_parallel_depth = original  # type: ignore[method-assign]
