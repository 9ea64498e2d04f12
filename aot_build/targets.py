"""Device targets: their names, what the build passes to Inductor for each, and which of them
the running host can execute.

The build side uses :func:`expand_aliases`, :func:`parse_target` and :func:`compile_options`;
the run side uses :func:`host_cpu_targets` and :func:`cuda_target_fits`. Both sides share the names below.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from pathlib import Path

from .constants import ENV_CROSS_TORCH
from .records import record

#: CPU targets by architecture, best first. An architecture not listed gets ``cpu-baseline``
#: (the compiler's default for it, no vector ISA): every build host torch runs on has one.
CPU_LEVELS: dict[str, tuple[str, ...]] = {
    "x86_64": ("cpu-avx512", "cpu-avx2", "cpu-baseline"),
    "aarch64": ("cpu-neon", "cpu-baseline"),
}

# The x86-64 micro-architecture levels the targets are compiled for (-march=x86-64-vN); the
# compiler may emit any instruction of the level, not only the vector ones, so a host must
# have every feature (``/proc/cpuinfo`` flag names; ``abm`` is how Linux names LZCNT).
_X86_V2 = frozenset({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"})
_X86_V3 = _X86_V2 | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
_X86_V4 = _X86_V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}

#: CPU features each target's code may use, by architecture; a target runs on a host only
#: when the host has all of them (and torch's own capability, see :func:`host_cpu_targets`).
CPU_FEATURES: dict[str, dict[str, frozenset[str]]] = {
    "x86_64": {"cpu-avx512": _X86_V4, "cpu-avx2": _X86_V3, "cpu-baseline": frozenset()},
    # ASIMD (NEON) is part of every Linux AArch64 CPU torch runs on; checked all the same
    "aarch64": {"cpu-neon": frozenset({"asimd"}), "cpu-baseline": frozenset()},
}

#: torch.backends.cpu.get_cpu_capability() → the targets such a host can run, best first.
_CAPABILITY_RUNS: dict[str, tuple[str, ...]] = {
    "AVX512": ("cpu-avx512", "cpu-avx2", "cpu-baseline"),
    "AVX2": ("cpu-avx2", "cpu-baseline"),
}

#: Inductor options per architecture and target. ``cpp.march`` pins the instruction set, so a
#: library never holds instructions beyond its target whatever CPU built it (Inductor's
#: default is ``-march=native``); "" means no -march flag: the compiler's default for the
#: architecture, which is its distribution baseline.
_CPU_OPTIONS: dict[str, dict[str, dict[str, object]]] = {
    "x86_64": {
        "cpu-avx512": {"cpp.march": "x86-64-v4", "cpp.simdlen": 512},
        "cpu-avx2": {"cpp.march": "x86-64-v3", "cpp.simdlen": 256},
        "cpu-baseline": {"cpp.march": "x86-64", "cpp.simdlen": 1},
    },
    "aarch64": {
        # Inductor's NEON code (at::vec::Vectorized over 128-bit ASIMD registers)
        "cpu-neon": {"cpp.march": "armv8-a", "cpp.simdlen": 128},
        "cpu-baseline": {"cpp.march": "armv8-a", "cpp.simdlen": 1},
    },
}
_OTHER_ARCH_OPTIONS: dict[str, dict[str, object]] = {"cpu-baseline": {"cpp.march": "", "cpp.simdlen": 1}}

#: Inductor options every CPU artifact is built with, whatever the target. By default Inductor
#: sizes each parallel reduction's per-thread buffers by the *build* machine's thread count
#: while OpenMP starts as many threads as the *running* machine has: built on 2 cores and run
#: with 8 threads, the extra threads write past those buffers (crash, or a silently wrong sum).
#: ``dynamic_threads`` sizes them at run time. ``threads`` fixes the hint Inductor's loop
#: planning uses, so the code does not depend on how many cores the build machine has.
CPU_THREAD_OPTIONS: dict[str, object] = {"cpp.dynamic_threads": True, "cpp.threads": 16}

#: Inductor options aot_build sets per target; ``inductor-options`` may not set them.
RESERVED_OPTIONS = ("cpp.march", "cpp.simdlen", *CPU_THREAD_OPTIONS)

#: Targets ``cpu`` (the default) stands for on each architecture: a set that gives every
#: machine of the architecture a compiled artifact (baseline) and the common fast level its
#: own. AVX-512 hosts run the AVX2 artifact; add ``cpu-avx512`` to build for them too.
PORTABLE_CPU: dict[str, tuple[str, ...]] = {
    "x86_64": ("cpu-avx2", "cpu-baseline"),
    "aarch64": ("cpu-neon", "cpu-baseline"),
}

#: Alias accepted in configuration: the portable set of :data:`PORTABLE_CPU` (the default).
CPU_ALIAS = "cpu"
#: Alias accepted in configuration: the build host's own best CPU level only.
HOST_CPU_ALIAS = "cpu-host"

# The minor version is one digit, the major one or two: sm86 is 8.6, sm100 is 10.0.
_CUDA_TARGET = r"^cuda-sm(\d+)(\d)$"  # compiled on first use: a CPU-only run never does


@record(frozen=True)
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
    """The host architecture, normalised (``x86_64``, ``aarch64``); in a cross build
    (``AOT_BUILD_CROSS_TORCH`` set) the architecture of that torch's libraries."""
    cross = os.environ.get(ENV_CROSS_TORCH, "").strip()
    if cross:
        return cross_arch(cross)
    m = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


@functools.cache
def cross_arch(torch_dir: str) -> str:
    """The architecture of the torch installed at ``torch_dir`` (its ``lib/libtorch_cpu.so``);
    ValueError naming the variable and what it should point at."""
    from .native.elf import ElfError, read_dynamic

    lib = Path(torch_dir) / "lib" / "libtorch_cpu.so"
    try:
        return read_dynamic(lib).machine
    except (OSError, ElfError) as exc:
        raise ValueError(
            f"{ENV_CROSS_TORCH}={torch_dir}: cannot read {lib} ({exc}); point it at the torch folder "
            "of torch's wheel for the target architecture, e.g. unpacked with pip install --target DIR "
            "--platform manylinux_2_28_aarch64 --only-binary=:all: --no-deps torch==<version>"
        ) from exc


def cpu_levels(arch: str | None = None) -> tuple[str, ...]:
    """CPU targets of ``arch`` (the host's by default), best first."""
    return CPU_LEVELS.get(arch or machine(), ("cpu-baseline",))


def known_target_names(arch: str | None = None) -> list[str]:
    """Every target name valid on ``arch`` (the host's by default), for messages."""
    return [*cpu_levels(arch), "cuda-sm80", "cuda-sm90", "..."]


def expand_aliases(names: list[str], arch: str | None = None) -> list[str]:
    """``names`` with the aliases replaced by what they stand for, duplicates dropped."""
    out: list[str] = []
    for name in names:
        if name == CPU_ALIAS:
            arch_ = arch or machine()
            out += PORTABLE_CPU.get(arch_, cpu_levels(arch_)[-1:])
        elif name == HOST_CPU_ALIAS:
            out.append(host_cpu_targets()[0])
        else:
            out.append(name)
    return list(dict.fromkeys(out))


def parse_target(name: str, arch: str | None = None) -> Target:
    """Turn a configured name (not an alias) into a :class:`Target`; ``ValueError`` names
    the valid ones."""
    arch = arch or machine()
    if name == HOST_CPU_ALIAS:
        name = host_cpu_targets()[0]
    if name in cpu_levels(arch):
        return Target(name, "cpu")
    m = re.match(_CUDA_TARGET, name)
    if m:
        return Target(name, "cuda", (int(m.group(1)), int(m.group(2))))
    raise ValueError(
        f"unknown target {name!r} on {arch}; valid targets: "
        + ", ".join(known_target_names(arch))
        + f" (or {CPU_ALIAS!r} for {', '.join(PORTABLE_CPU.get(arch, cpu_levels(arch)[-1:]))}, "
        f"{HOST_CPU_ALIAS!r} for this build host's own CPU level)"
    )


def compile_options(target: Target, arch: str | None = None) -> dict[str, object]:
    """Inductor config for ``target``: pins the CPU instruction set; CUDA targets: see
    :func:`cuda_compile_options`."""
    if target.device != "cpu":
        return cuda_compile_options(target, arch)
    table = _CPU_OPTIONS.get(arch or machine(), _OTHER_ARCH_OPTIONS)
    return {**CPU_THREAD_OPTIONS, **table[target.name]}


def cpu_flags(path: str = "/proc/cpuinfo", block: int = 16384) -> frozenset[str] | None:
    """The host CPU's feature flags (Linux ``/proc/cpuinfo``), or None where unknown.

    Only the line this architecture's kernel writes counts (x86: ``flags``, Arm:
    ``Features``): under qemu-user, ``/proc/cpuinfo`` is the emulating host's. Read as bytes
    up to the first CPU's line (~50 µs; the whole file as text cost ~250 µs of a first call).
    """
    key = b"flags" if machine() in ("x86_64", "i686") else b"Features"
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        data = b""
        while True:
            chunk = os.read(fd, block)
            data += chunk
            lines = data.split(b"\n")
            for line in lines if not chunk else lines[:-1]:  # whole lines (all of them at the end)
                name, colon, value = line.partition(b":")
                if colon and name.strip() == key:
                    return frozenset(value.decode("ascii", "replace").split())
            if not chunk:
                return None
    except OSError:
        return None
    finally:
        os.close(fd)


_FLAGS: list[frozenset[str] | None] = []


def missing_features(target: str, arch: str | None = None, flags: frozenset[str] | None = None) -> set[str]:
    """Features ``target``'s code may use that this host lacks (empty: none, or unknown)."""
    if flags is None:
        if not _FLAGS:
            _FLAGS.append(cpu_flags())  # read once per process: /proc/cpuinfo is not cheap
        flags = _FLAGS[0]
    need = CPU_FEATURES.get(arch or machine(), {}).get(target, frozenset())
    return set(need - flags) if flags is not None else set()


def host_cpu_targets() -> tuple[str, ...]:
    """CPU targets this process may load, best first.

    A target needs every feature its code may use (:data:`CPU_FEATURES`, read from the CPU's
    flags) and is capped by torch's own view of the CPU, which honours
    ``ATEN_CPU_CAPABILITY``: forcing torch down to AVX2 forces aot_build down too.
    """
    import torch

    levels = cpu_levels()
    capability = torch.backends.cpu.get_cpu_capability()
    runs = _CAPABILITY_RUNS.get(capability, ("cpu-baseline",)) if machine() == "x86_64" else levels
    ok = tuple(t for t in levels if t in runs and not missing_features(t))
    return ok or ("cpu-baseline",)


def best_cpu_target(available: set[str] | list[str], host: tuple[str, ...] | None = None) -> str | None:
    """The best of ``available`` CPU targets this host can run (``host``: its runnable
    targets, best first; default :func:`host_cpu_targets`), or None."""
    for name in host if host is not None else host_cpu_targets():
        if name in available:
            return name
    return None


def cuda_compile_options(target: Target, arch: str | None = None) -> dict[str, object]:
    """Inductor config for a CUDA target: kernels embedded in the one library (no cubin files
    beside it), compiled for this GPU's architecture only (SASS, no PTX to JIT elsewhere), and
    host code for the architecture's baseline CPU (it runs on whatever CPU drives the GPU)."""
    return {
        "aot_inductor.embed_kernel_binary": True,
        "aot_inductor.emit_multi_arch_kernel": False,
        **CPU_THREAD_OPTIONS,  # CPU kernels of a CUDA graph (ops left on the host)
        **_CPU_OPTIONS.get(arch or machine(), _OTHER_ARCH_OPTIONS)["cpu-baseline"],
    }


def cuda_build_problem(target: Target) -> str | None:
    """Why this build machine cannot compile ``target`` (None: it can).

    Inductor generates and compiles kernels for the GPU it runs on; there is no option to
    aim at another architecture, so a ``cuda-smXY`` artifact is built only on a GPU of
    capability X.Y, and the artifact's recorded capability is checked after the compile.
    """
    import torch

    assert target.capability is not None
    want = f"{target.capability[0]}.{target.capability[1]}"
    if not torch.cuda.is_available():
        return f"no CUDA device on the build machine; build it with a GPU of compute capability {want}"
    cap = tuple(torch.cuda.get_device_capability())
    if cap != target.capability:
        return (
            f"the build GPU ({torch.cuda.get_device_name()}) has compute capability {cap[0]}.{cap[1]}, "
            f"and Inductor compiles kernels for the GPU it runs on; build {target.name} with a GPU of "
            f"capability {want} (choose it with CUDA_VISIBLE_DEVICES, or build on such a machine)"
        )
    return None


def cuda_target_fits(target: Target, device_capability: tuple[int, int]) -> bool:
    """True when a CUDA artifact for ``target`` runs on a device of ``device_capability``.

    Kernels built for sm_XY run on sm_XZ with Z >= Y (same major), not across majors.
    """
    if target.capability is None:
        return False
    return target.capability[0] == device_capability[0] and target.capability[1] <= device_capability[1]
