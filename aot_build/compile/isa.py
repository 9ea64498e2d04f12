"""Pin the vector ISA Inductor compiles for, whatever CPU the build runs on.

Inductor picks the best ISA of the build host (AVX-512 with VNNI, BF16 or AMX where present)
and adds its flags to the compiler command line; ``cpp.simdlen`` only chooses among those
the host offers. A shipped library must hold only what its target guarantees, so while a
target compiles, Inductor's list of valid ISAs is replaced by exactly the target's one:
``cpu-avx512`` gets AVX-512 F/BW/DQ/VL (torch's own AVX512 level: no VNNI, BF16, AMX),
``cpu-avx2`` AVX2+FMA, ``cpu-baseline`` none (scalar code, SSE2 at most). On other
architectures only ``cpu-baseline`` exists, and it gets no vector ISA either (Inductor would
pick NEON/SVE/VSX from the build host).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..targets import Target, machine


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
    return None


@contextlib.contextmanager
def pinned_vec_isa(target: Target) -> Iterator[None]:
    """While active, Inductor compiles CPU code for exactly ``target``'s vector ISA. A CUDA
    target's host code gets none: it runs on whatever CPU drives the GPU."""
    from torch._inductor import cpu_vec_isa

    name = target.name if target.device == "cpu" else "cpu-baseline"
    isa = _portable_isa(name) if machine() == "x86_64" else None
    original = cpu_vec_isa.valid_vec_isa_list
    cpu_vec_isa.valid_vec_isa_list = lambda: [isa] if isa is not None else []  # type: ignore[assignment]
    try:
        yield
    finally:
        cpu_vec_isa.valid_vec_isa_list = original  # type: ignore[assignment]
