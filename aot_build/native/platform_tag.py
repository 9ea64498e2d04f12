"""The honest manylinux platform tag of a wheel, computed from the shared libraries it ships.

A wheel tagged ``linux_x86_64`` cannot be uploaded to PyPI, and one tagged with too old a
manylinux tag installs on systems whose glibc/libstdc++ then fail to load it. auditwheel knows
the rules but is not a build-time dependency of aot_build, so its policy table is transcribed
here (compacted) and applied to what :mod:`aot_build.package.elf` reads.

Libraries a runtime dependency supplies (torch's ``libtorch_cpu.so``, ``libc10.so``,
``libgomp.so.1``...) are not the system's business: pass them as ``provided``.

Not modelled (irrelevant to AOTInductor libraries): auditwheel's per-symbol blacklist of
``libz.so.1`` internals, and ISA-level checks (x86-64-v2+, ARM hard-float).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Collection, Iterable
from pathlib import Path

from ..constants import ENV_CROSS_TORCH
from .elf import ElfDeps, ElfError, read_dynamic, symbols_by_version

__all__ = ["PlatformTagError", "check_floor", "platform_tag", "policy_minors", "torch_provided_libs"]


class PlatformTagError(ValueError):
    """No manylinux tag is consistent with the libraries."""


# --- Policy table ----------------------------------------------------------------------------
# Source: auditwheel/policy/manylinux-policy.json of auditwheel 6.8.2 (regenerate when it changes:
# tests/unit/test_platform_tag.py compares this table with the installed auditwheel's JSON).
#
# Per policy (keyed by glibc minor, manylinux_2_<minor>) and architecture: the highest allowed
# numeric version of each family below. In that JSON every family's allowed numeric versions
# are exactly "all versions known for that arch <= the maximum" (checked by the tests), so a
# maximum is enough. None: the policy allows no version of that family on that arch (auditwheel
# 6.8.2 lists LIBATOMIC as empty for x86_64/s390x manylinux_2_17). "*" is the row for any arch
# not listed. Families not listed here
# (GOMP_*, OMP_*, ...) are not checked, as in auditwheel.
_FAMILIES = ("GLIBC", "GLIBCXX", "CXXABI", "GCC", "LIBATOMIC", "ZLIB")
_Row = tuple[str | None, str | None, str | None, str | None, str | None, str | None]
_MAXIMA: dict[int, dict[str, _Row]] = {
    17: {
        "*": ("2.17", "3.4.19", "1.3.7", "4.7.0", "1.0", "1.2.5.2"),
        "x86_64": ("2.17", "3.4.19", "1.3.7", "4.8.0", None, "1.2.5.2"),
        "i686": ("2.17", "3.4.19", "1.3.7", "4.8.0", "1.0", "1.2.5.2"),
        "aarch64": ("2.18", "3.4.19", "1.3.7", "4.7.0", "1.0", "1.2.5.2"),
        "s390x": ("2.17", "3.4.19", "1.3.7", "4.7.0", None, "1.2.5.2"),
    },
    24: {
        "*": ("2.24", "3.4.22", "1.3.10", "4.7.0", "1.2", "1.2.5.2"),
        "x86_64": ("2.24", "3.4.22", "1.3.10", "4.8.0", "1.2", "1.2.5.2"),
        "i686": ("2.24", "3.4.22", "1.3.10", "4.8.0", "1.2", "1.2.5.2"),
    },
    26: {
        "*": ("2.26", "3.4.24", "1.3.11", "7.0.0", "1.2", "1.2.9"),
        "x86_64": ("2.26", "3.4.22", "1.3.10", "4.8.0", "1.2", "1.2.5.2"),
        "aarch64": ("2.26", "3.4.24", "1.3.11", "7.0.0", "1.2", "1.2.5.2"),
    },
    27: {"*": ("2.27", "3.4.24", "1.3.11", "7.0.0", "1.2", "1.2.9")},
    28: {"*": ("2.28", "3.4.24", "1.3.11", "7.0.0", "1.2", "1.2.9")},
    31: {"*": ("2.31", "3.4.28", "1.3.12", "7.0.0", "1.2", "1.2.9")},
    34: {
        "*": ("2.34", "3.4.29", "1.3.13", "7.0.0", "1.2", "1.2.9"),
        "aarch64": ("2.34", "3.4.29", "1.3.13", "11.0", "1.2", "1.2.9"),
    },
    35: {
        "*": ("2.35", "3.4.30", "1.3.13", "7.0.0", "1.2", "1.2.9"),
        "x86_64": ("2.35", "3.4.30", "1.3.13", "12.0.0", "1.2", "1.2.9"),
        "i686": ("2.35", "3.4.30", "1.3.13", "12.0.0", "1.2", "1.2.9"),
        "aarch64": ("2.35", "3.4.30", "1.3.13", "11.0", "1.2", "1.2.9"),
    },
    36: {
        "*": ("2.36", "3.4.30", "1.3.13", "7.0.0", "1.2", "1.2.9"),
        "x86_64": ("2.36", "3.4.30", "1.3.13", "12.0.0", "1.2", "1.2.9"),
        "i686": ("2.36", "3.4.30", "1.3.13", "12.0.0", "1.2", "1.2.12"),
        "aarch64": ("2.36", "3.4.30", "1.3.13", "11.0", "1.2", "1.2.9"),
    },
    37: {
        "*": ("2.36", "3.4.30", "1.3.13", "7.0.0", "1.2", "1.2.12"),
        "x86_64": ("2.36", "3.4.30", "1.3.13", "12.0.0", "1.2", "1.2.12"),
        "i686": ("2.37", "3.4.30", "1.3.13", "12.0.0", "1.2", "1.2.12"),
        "aarch64": ("2.36", "3.4.30", "1.3.13", "11.0", "1.2", "1.2.12"),
        "armv7l": ("2.37", "3.4.30", "1.3.13", "7.0.0", "1.2", "1.2.12"),
    },
    38: {
        "*": ("2.38", "3.4.30", "1.3.13", "7.0.0", "1.2", "1.2.12"),
        "x86_64": ("2.38", "3.4.30", "1.3.13", "12.0.0", "1.2", "1.2.12"),
        "i686": ("2.38", "3.4.30", "1.3.13", "12.0.0", "1.2", "1.2.12"),
        "aarch64": ("2.38", "3.4.30", "1.3.13", "11.0", "1.2", "1.2.12"),
    },
    39: {"*": ("2.39", "3.4.33", "1.3.15", "14.0.0", "1.2", "1.2.12")},
    40: {"*": ("2.40", "3.4.33", "1.3.15", "14.0.0", "1.2", "1.2.12")},
    41: {"*": ("2.41", "3.4.33", "1.3.15", "14.0.0", "1.2", "1.2.12")},
}
# Non-numeric versions, per arch: first policy (glibc minor) that allows them -> the versions.
_SPECIALS_BY_POLICY: dict[str, dict[int, str]] = {
    "x86_64": {17: "CXXABI_TM_1", 24: "CXXABI_FLOAT128", 36: "GLIBC_ABI_DT_RELR"},
    "i686": {17: "CXXABI_TM_1", 24: "CXXABI_FLOAT128", 36: "GLIBC_ABI_DT_RELR"},
    "aarch64": {17: "CXXABI_TM_1", 36: "GLIBC_ABI_DT_RELR"},
    "ppc64le": {
        17: "CXXABI_TM_1 CXXABI_LDBL_1.3 GLIBCXX_LDBL_3.4 GLIBCXX_LDBL_3.4.7 GLIBCXX_LDBL_3.4.10",
        24: "GLIBCXX_LDBL_3.4.21",
        34: "GLIBCXX_LDBL_3.4.29 GLIBCXX_IEEE128_3.4.29 CXXABI_IEEE128_1.3.13",
        35: "GLIBCXX_IEEE128_3.4.30",
        36: "GLIBC_ABI_DT_RELR",
        39: "GLIBCXX_IEEE128_3.4.31 GLIBCXX_LDBL_3.4.31",
    },
    "s390x": {
        17: "CXXABI_TM_1 CXXABI_LDBL_1.3 GLIBCXX_LDBL_3.4 GLIBCXX_LDBL_3.4.7 GLIBCXX_LDBL_3.4.10",
        24: "GLIBCXX_LDBL_3.4.21",
        34: "GLIBCXX_LDBL_3.4.29",
        36: "GLIBC_ABI_DT_RELR",
        39: "GLIBCXX_LDBL_3.4.31",
    },
    "armv7l": {17: "CXXABI_TM_1 CXXABI_ARM_1.3.3", 36: "GLIBC_ABI_DT_RELR"},
}
_SPECIALS: dict[str, dict[str, int]] = {
    arch: {version: minor for minor, versions in by_policy.items() for version in versions.split()}
    for arch, by_policy in _SPECIALS_BY_POLICY.items()
}
_ARCHES = tuple(_SPECIALS)  # every policy above covers exactly these arches
_WHITELIST = frozenset(
    """libc.so.6 libm.so.6 libdl.so.2 librt.so.1 libpthread.so.0 libanl.so.1 libnsl.so.1 libutil.so.1
    libresolv.so.2 libmvec.so.1 libgcc_s.so.1 libstdc++.so.6 libatomic.so.1 libz.so.1 libexpat.so.1
    libX11.so.6 libXext.so.6 libXrender.so.1 libICE.so.6 libSM.so.6 libGL.so.1 libglib-2.0.so.0
    libgobject-2.0.so.0 libgthread-2.0.so.0""".split()
)
_NOT_WHITELISTED = {17: frozenset({"libmvec.so.1"})}  # added in manylinux_2_24
# The dynamic loader is always present: needing it is no reason to bundle anything.
_LOADERS = ("ld-linux", "ld64.so.")
_RELR_VERSION = "GLIBC_ABI_DT_RELR"


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _is_numeric(version: str) -> bool:
    return all(part.isdigit() for part in version.split("."))


def _is_loader(name: str) -> bool:
    return name.startswith(_LOADERS)


def _allows(minor: int, arch: str, version: str) -> bool:
    """Whether policy manylinux_2_<minor> allows symbol version ``version`` (e.g. "GLIBC_2.34")."""
    family, _, number = version.partition("_")
    if family not in _FAMILIES:
        return True
    if not _is_numeric(number):
        first = _SPECIALS[arch].get(version)
        return first is not None and first <= minor
    row = _MAXIMA[minor].get(arch, _MAXIMA[minor]["*"])
    maximum = row[_FAMILIES.index(family)]
    return maximum is not None and _key(number) <= _key(maximum)


def _required(lib: ElfDeps) -> set[str]:
    """Every needed version, the dynamic loader's included.

    auditwheel skips versions needed from ld-linux*/ld64.so.*, but they are as real as libc's:
    a statically linked libgcc_eh needs ``_dl_find_object@GLIBC_2.35`` from the loader, and a
    library tagged lower would fail to load on an older glibc.
    """
    required = {v for names in lib.versions.values() for v in names}
    if lib.relr:  # DT_RELR needs a glibc that understands it, whether or not ld recorded that
        required.add(_RELR_VERSION)
    return required


def platform_tag(libs: Iterable[ElfDeps], provided: Collection[str] = frozenset()) -> str:
    """The most compatible manylinux tag (lowest glibc) under which every one of ``libs`` loads.

    ``provided``: sonames that a runtime dependency supplies (see :func:`torch_provided_libs`);
    the libraries in ``libs`` also provide their own file names and sonames to each other.
    Raises PlatformTagError when a NEEDED library is neither whitelisted nor provided (it would
    have to be bundled), when a required symbol version is newer than every known policy, or
    when the libraries are for different architectures.
    """
    libs = list(libs)
    if not libs:
        raise PlatformTagError("no shared libraries to compute a platform tag from")
    arches = {lib.machine for lib in libs}
    if len(arches) > 1:
        detail = ", ".join(f"{lib.path} ({lib.machine})" for lib in libs)
        raise PlatformTagError(f"the wheel's libraries are for different architectures: {detail}")
    (arch,) = arches
    if arch not in _ARCHES:
        raise PlatformTagError(
            f"no manylinux policy for architecture {arch!r} ({libs[0].path}); known: {', '.join(_ARCHES)}"
        )
    own = {Path(lib.path).name for lib in libs} | {lib.soname for lib in libs if lib.soname}
    external = set(provided) | own

    newest = max(_MAXIMA)
    for lib in libs:
        for soname in lib.needed:
            if soname not in _WHITELIST and soname not in external and not _is_loader(soname):
                raise PlatformTagError(
                    f"{lib.path} needs {soname}, which no manylinux policy lets a wheel assume on the "
                    "system and which no dependency provides: it would have to be bundled in the wheel "
                    "(e.g. with auditwheel repair), or the library built without it"
                )
        too_new = sorted(v for v in _required(lib) if not _allows(newest, arch, v))
        if too_new:
            raise PlatformTagError(
                f"{lib.path} requires symbol version(s) {', '.join(too_new)}, newer than (or unknown "
                f"to) every known manylinux policy (the newest known is manylinux_2_{newest})"
            )

    for minor in sorted(_MAXIMA):
        unavailable = _NOT_WHITELISTED.get(minor, frozenset()) - external
        if all(
            not unavailable.intersection(lib.needed) and all(_allows(minor, arch, v) for v in _required(lib))
            for lib in libs
        ):
            return f"manylinux_2_{minor}_{arch}"
    raise AssertionError("unreachable: the newest policy was checked above")  # pragma: no cover


def policy_minors() -> list[int]:
    """The glibc minors of the known manylinux policies (``manylinux_2_<minor>``), oldest first."""
    return sorted(_MAXIMA)


def floor_tag(libs: Iterable[ElfDeps], provided: Collection[str], floor: int | None) -> str:
    """The wheel's tag for a build aiming at manylinux ``floor`` (a glibc minor; None: no
    floor, the most compatible tag, :func:`platform_tag`): ``manylinux_2_<floor>_<arch>`` when
    every library loads there, as ``auditwheel repair --plat`` tags. Raises PlatformTagError
    naming each symbol that needs more (:func:`check_floor`)."""
    libs = list(libs)
    tag = platform_tag(libs, provided)
    if floor is None:
        return tag
    check_floor(libs, floor)
    minor = int(tag.split("_")[2])
    return tag if minor >= floor else f"manylinux_2_{floor}_{libs[0].machine}"


def check_floor(libs: Iterable[ElfDeps], floor: int) -> None:
    """Raise PlatformTagError when a library of ``libs`` needs a symbol version that policy
    manylinux_2_<floor> does not allow; the message names each such symbol and version, per
    library, and the ways out."""
    problems = []
    for lib in libs:
        arch = lib.machine if lib.machine in _ARCHES else "*"
        too_new = sorted(v for v in _required(lib) if arch == "*" or not _allows(floor, arch, v))
        if not too_new:
            continue
        try:
            by_version = symbols_by_version(lib.path)
        except (OSError, ElfError):
            by_version = {}
        named = [
            f"{version} ({', '.join(sorted(by_version[version])[:8])}"
            f"{', ...' if len(by_version[version]) > 8 else ''})"
            if by_version.get(version)
            else version
            for version in too_new
        ]
        problems.append(f"{lib.path}: {'; '.join(named)}")
    if problems:
        raise PlatformTagError(
            f"the libraries need more than manylinux_2_{floor} allows (symbol versions, and the "
            "symbols that need them):\n  " + "\n  ".join(problems) + '\nSet manylinux = "host" '
            "(or a newer floor) in [tool.aot-build], or AOT_BUILD_MANYLINUX, to ship them tagged "
            "with what they need; or build on a system whose glibc and libstdc++ are no newer "
            f"than manylinux_2_{floor}'s"
        )


def torch_provided_libs() -> set[str]:
    """Sonames the installed torch makes available to a library loaded after it.

    That is the files in ``torch/lib`` (and their sonames), what those libraries NEED in turn
    (supplied by torch's own requirements, e.g. the CUDA runtime from nvidia-* wheels in a CUDA
    build), and ``libcuda.so.1``, the driver. torch is located, not imported: importing it takes
    seconds. Returns an empty set when torch is not installed. In a cross build
    (``AOT_BUILD_CROSS_TORCH``), the target's torch counts instead.
    """
    cross = os.environ.get(ENV_CROSS_TORCH, "").strip()
    if cross:
        locations = [cross]
    else:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return set()
        locations = list(spec.submodule_search_locations)
    provided = {"libcuda.so.1"}
    for location in locations:
        lib_dir = Path(location) / "lib"
        if not lib_dir.is_dir():
            continue
        for path in sorted(lib_dir.iterdir()):
            if ".so" not in path.name or not path.is_file():
                continue
            provided.add(path.name)
            try:
                deps = read_dynamic(path)
            except ElfError:
                continue
            provided.update(deps.needed)
            if deps.soname:
                provided.add(deps.soname)
    return provided
