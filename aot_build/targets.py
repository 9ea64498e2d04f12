"""Device targets: their names, what the build passes to Inductor for each, and which of them
the running host can execute.

The build side uses :func:`parse_target` and :func:`compile_options`; the run side uses
:func:`host_cpu_targets` and :func:`cuda_target_fits`. Both sides share the names below.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass

#: CPU targets by architecture, best first. The first one a host supports is its own level.
CPU_LEVELS: dict[str, tuple[str, ...]] = {
    "x86_64": ("cpu-avx512", "cpu-avx2", "cpu-baseline"),
    "aarch64": ("cpu-baseline",),
}

#: torch.backends.cpu.get_cpu_capability() → the targets such a host can run, best first.
_CAPABILITY_RUNS: dict[str, tuple[str, ...]] = {
    "AVX512": ("cpu-avx512", "cpu-avx2", "cpu-baseline"),
    "AVX2": ("cpu-avx2", "cpu-baseline"),
}

#: Inductor options that pin the emitted vector ISA, so a library never holds instructions
#: beyond its target whatever CPU built it (Inductor's default is ``-march=native``).
_CPU_OPTIONS: dict[str, dict[str, object]] = {
    "cpu-avx512": {"cpp.march": "x86-64-v4", "cpp.simdlen": 512},
    "cpu-avx2": {"cpp.march": "x86-64-v3", "cpp.simdlen": 256},
    "cpu-baseline": {"cpp.march": "x86-64", "cpp.simdlen": 1},
}
_AARCH64_OPTIONS: dict[str, dict[str, object]] = {
    "cpu-baseline": {"cpp.march": "armv8-a", "cpp.simdlen": 1},
}

#: Alias accepted in configuration: the build host's own best CPU level.
HOST_CPU_ALIAS = "cpu"

# The minor version is one digit, the major one or two: sm86 is 8.6, sm100 is 10.0.
_CUDA_RE = re.compile(r"^cuda-sm(\d+)(\d)$")


@dataclass(frozen=True)
class Target:
    """One device target.

    Args:
        name: canonical name, e.g. ``cpu-avx2`` or ``cuda-sm90``.
        device: ``"cpu"`` or ``"cuda"``, the device type of the tensors it accepts.
        capability: for CUDA targets the compute capability ``(major, minor)``; else ``None``.
    """

    name: str
    device: str
    capability: tuple[int, int] | None = None


def machine() -> str:
    """The host architecture, normalised (``x86_64``, ``aarch64``)."""
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


def known_target_names(arch: str | None = None) -> list[str]:
    """Every target name valid on ``arch`` (the host's by default), for messages."""
    return [*CPU_LEVELS.get(arch or machine(), ()), "cuda-sm80", "cuda-sm90", "..."]


def parse_target(name: str, arch: str | None = None) -> Target:
    """Turn a configured name into a :class:`Target`; ``ValueError`` names the valid ones."""
    arch = arch or machine()
    if name == HOST_CPU_ALIAS:
        name = host_cpu_targets()[0]
    if name in CPU_LEVELS.get(arch, ()):
        return Target(name, "cpu")
    m = _CUDA_RE.match(name)
    if m:
        return Target(name, "cuda", (int(m.group(1)), int(m.group(2))))
    raise ValueError(
        f"unknown target {name!r} on {arch}; valid targets: "
        + ", ".join(known_target_names(arch))
        + f" (or {HOST_CPU_ALIAS!r} for this build host's own CPU level)"
    )


def compile_options(target: Target, arch: str | None = None) -> dict[str, object]:
    """Inductor config for ``target``: pins the CPU vector ISA; CUDA targets need none."""
    if target.device != "cpu":
        return {}
    table = _AARCH64_OPTIONS if (arch or machine()) == "aarch64" else _CPU_OPTIONS
    return dict(table[target.name])


def host_cpu_targets() -> tuple[str, ...]:
    """CPU targets this process may load, best first.

    Follows torch's own view of the CPU (which honours ``ATEN_CPU_CAPABILITY``), so forcing
    torch down to AVX2 forces aot_build down too.
    """
    import torch

    levels = CPU_LEVELS.get(machine(), ("cpu-baseline",))
    runs = _CAPABILITY_RUNS.get(torch.backends.cpu.get_cpu_capability(), ("cpu-baseline",))
    return tuple(t for t in levels if t in runs) or ("cpu-baseline",)


def best_cpu_target(available: set[str] | list[str], host: tuple[str, ...] | None = None) -> str | None:
    """The best of ``available`` CPU targets this host can run (``host``: its runnable
    targets, best first; default :func:`host_cpu_targets`), or None."""
    for name in host if host is not None else host_cpu_targets():
        if name in available:
            return name
    return None


def cuda_target_fits(target: Target, device_capability: tuple[int, int]) -> bool:
    """True when a CUDA artifact for ``target`` runs on a device of ``device_capability``.

    Kernels built for sm_XY run on sm_XZ with Z >= Y (same major), not across majors.
    """
    if target.capability is None:
        return False
    return target.capability[0] == device_capability[0] and target.capability[1] <= device_capability[1]
