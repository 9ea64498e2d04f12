"""aot_build.package.elf and .platform_tag: checked against readelf/pyelftools and auditwheel itself."""

from __future__ import annotations

import base64
import hashlib
import importlib.machinery
import importlib.util
import itertools
import json
import re
import shutil
import struct
import subprocess
import zipfile
from pathlib import Path

import pytest

from aot_build.native import platform_tag as pt
from aot_build.native.elf import ElfDeps, ElfError, read_dynamic
from aot_build.native.platform_tag import PlatformTagError, platform_tag, torch_provided_libs

# --- Synthetic ELF files: every class/endianness, not only what the local compiler makes -----

EM = {"x86_64": 62, "i386": 3, "ppc64": 21, "s390": 22, "arm": 40, "aarch64": 183}
SHT_STRTAB, SHT_DYNAMIC, SHT_VERNEED = 3, 6, 0x6FFFFFFE


def make_elf(
    *,
    is64: bool = True,
    little: bool = True,
    machine: int = EM["x86_64"],
    needed: tuple[str, ...] = (),
    soname: str | None = None,
    verneed: dict[str, list[str]] | None = None,
    relr: bool = False,
    extended_shnum: bool = False,
) -> bytes:
    """A minimal ET_DYN file: .dynstr, .dynamic, .gnu.version_r, .shstrtab; section headers last."""
    e = "<" if little else ">"
    verneed = verneed or {}
    strtab = bytearray(b"\0")

    def s(text: str) -> int:
        strtab.extend(text.encode() + b"\0")
        return len(strtab) - len(text) - 1

    dyn_fmt = e + ("qQ" if is64 else "iI")
    dyn = [(1, s(n)) for n in needed]
    if soname:
        dyn.append((14, s(soname)))
    if relr:
        dyn.append((36, 0))
    dyn.append((0, 0))
    dynamic = b"".join(struct.pack(dyn_fmt, tag, val) for tag, val in dyn)

    vr = bytearray()
    files = list(verneed.items())
    for i, (file, names) in enumerate(files):
        last_file = i == len(files) - 1
        vr += struct.pack(e + "HHIII", 1, len(names), s(file), 16, 0 if last_file else 16 + 16 * len(names))
        for j, name in enumerate(names):
            vr += struct.pack(e + "IHHII", 0, 0, 2 + j, s(name), 0 if j == len(names) - 1 else 16)

    shstr = b"\0.dynstr\0.dynamic\0.gnu.version_r\0.shstrtab\0"
    ehsize, shentsize = (64, 64) if is64 else (52, 40)
    body = bytearray(b"\0" * ehsize)
    placed = []
    for data in (bytes(strtab), dynamic, bytes(vr), shstr):
        body += b"\0" * (-len(body) % 8)
        placed.append((len(body), len(data)))
        body += data
    body += b"\0" * (-len(body) % 8)
    shoff = len(body)
    sh_fmt = e + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII")
    dyn_ent = struct.calcsize(dyn_fmt)
    nsec = 5
    headers = [
        (0, 0, 0, 0, 0, nsec if extended_shnum else 0, 0, 0, 0, 0),
        (1, SHT_STRTAB, 2, 0, *placed[0], 0, 0, 1, 0),
        (9, SHT_DYNAMIC, 3, 0, *placed[1], 1, 0, 8, dyn_ent),
        (18, SHT_VERNEED, 2, 0, *placed[2], 1, len(files), 8, 0),
        (33, SHT_STRTAB, 0, 0, *placed[3], 0, 0, 1, 0),
    ]
    for h in headers:
        body += struct.pack(sh_fmt, *h)
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 1 if little else 2, 1]) + b"\0" * 9
    ehdr_fmt = e + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH")
    shnum = 0 if extended_shnum else nsec
    body[:ehsize] = ident + struct.pack(
        ehdr_fmt, 3, machine, 1, 0, 0, shoff, 0, ehsize, 0, 0, shentsize, shnum, 4
    )
    return bytes(body)


VARIANTS = [
    pytest.param(True, True, EM["x86_64"], "x86_64", id="elf64-le-x86_64"),
    pytest.param(False, True, EM["i386"], "i686", id="elf32-le-i686"),
    pytest.param(True, False, EM["ppc64"], "ppc64", id="elf64-be-ppc64"),
    pytest.param(True, True, EM["ppc64"], "ppc64le", id="elf64-le-ppc64le"),
    pytest.param(True, False, EM["s390"], "s390x", id="elf64-be-s390x"),
    pytest.param(False, False, EM["s390"], "s390", id="elf32-be-s390"),
    pytest.param(False, True, EM["arm"], "armv7l", id="elf32-le-armv7l"),
    pytest.param(True, True, EM["aarch64"], "aarch64", id="elf64-le-aarch64"),
    pytest.param(True, True, 9999, "unknown-e_machine-9999", id="unknown-machine"),
]
SAMPLE = {
    "needed": ("libfoo.so.1", "libc.so.6"),
    "soname": "libsynth.so",
    "verneed": {"libc.so.6": ["GLIBC_2.17", "GLIBC_2.2.5"], "libstdc++.so.6": ["GLIBCXX_3.4.21"]},
    "relr": True,
}


@pytest.mark.parametrize(("is64", "little", "machine", "expected"), VARIANTS)
def test_synthetic_elf_variants(
    tmp_path: Path, is64: bool, little: bool, machine: int, expected: str
) -> None:
    path = tmp_path / "libsynth.so"
    path.write_bytes(make_elf(is64=is64, little=little, machine=machine, **SAMPLE))  # type: ignore[arg-type]
    deps = read_dynamic(path)
    assert deps == ElfDeps(
        path=str(path),
        machine=expected,
        needed=("libfoo.so.1", "libc.so.6"),
        versions={
            "libc.so.6": frozenset({"GLIBC_2.17", "GLIBC_2.2.5"}),
            "libstdc++.so.6": frozenset({"GLIBCXX_3.4.21"}),
        },
        relr=True,
        soname="libsynth.so",
    )
    elftools = pytest.importorskip("elftools.elf.elffile")  # the synthetic file is valid ELF to others too
    assert _pyelftools_deps(elftools, path) == (deps.needed, deps.versions)


def test_extended_section_numbering(tmp_path: Path) -> None:
    path = tmp_path / "libext.so"
    path.write_bytes(make_elf(extended_shnum=True, needed=("libz.so.1",)))
    assert read_dynamic(path).needed == ("libz.so.1",)


@pytest.mark.parametrize(("is64", "little"), [(True, True), (False, False), (True, False), (False, True)])
def test_every_truncation_raises_elf_error(tmp_path: Path, is64: bool, little: bool) -> None:
    data = make_elf(is64=is64, little=little, **SAMPLE)  # type: ignore[arg-type]
    path = tmp_path / "libcut.so"
    for length in range(len(data)):  # section headers come last, so every prefix is broken
        path.write_bytes(data[:length])
        with pytest.raises(ElfError, match=re.escape(str(path))):
            read_dynamic(path)


def _patch(data: bytes, offset: int, fmt: str, *values: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, offset, *values)
    return bytes(out)


def _shdr_offset(data: bytes, index: int) -> int:
    shoff: int = struct.unpack_from("<Q", data, 0x28)[0]
    return shoff + 64 * index


def _dynstr_size(data: bytes) -> int:
    size: int = struct.unpack_from("<Q", data, _shdr_offset(data, 1) + 32)[0]
    return size


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda d: d[:4] + b"\x07" + d[5:], "bad EI_CLASS"),
        (lambda d: d[:5] + b"\x09" + d[6:], "bad EI_DATA"),
        (lambda d: _patch(d, 0x28, "<Q", 0), "no section headers"),
        (lambda d: _patch(d, 0x3A, "<H", 16), "e_shentsize"),
        (lambda d: _patch(d, 0x3C, "<H", 60000), "beyond the end"),
        # .dynamic's sh_link -> .dynamic itself (not a string table), then -> out of range
        (lambda d: _patch(d, _shdr_offset(d, 2) + 40, "<I", 2), "not a string table"),
        (lambda d: _patch(d, _shdr_offset(d, 2) + 40, "<I", 77), "bad section"),
        # .dynstr's size shrunk to 1 byte: every name offset falls outside it
        (lambda d: _patch(d, _shdr_offset(d, 1) + 32, "<Q", 1), "outside its string table"),
        # .dynstr's last byte (a NUL) dropped: the last name is unterminated
        (lambda d: _patch(d, _shdr_offset(d, 1) + 32, "<Q", _dynstr_size(d) - 1), "not NUL-terminated"),
        # .gnu.version_r: an aux offset pointing outside the section
        (
            lambda d: _patch(d, struct.unpack_from("<Q", d, _shdr_offset(d, 3) + 24)[0] + 8, "<I", 4096),
            "auxiliary entry",
        ),
        # the first entry's vn_next jumping past the end of the section
        (
            lambda d: _patch(d, struct.unpack_from("<Q", d, _shdr_offset(d, 3) + 24)[0] + 12, "<I", 4096),
            "entry at offset 4096 is outside the section",
        ),
    ],
)
def test_malformed_elf_raises_elf_error(tmp_path: Path, corrupt, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "libbad.so"
    path.write_bytes(corrupt(make_elf(**SAMPLE)))  # type: ignore[arg-type]
    with pytest.raises(ElfError, match=re.escape(str(path)) + ".*" + re.escape(message)):
        read_dynamic(path)


@pytest.mark.parametrize("content", [b"", b"#!/bin/sh\necho hi\n", b"\x7fEL", b"PK\x03\x04" + b"\0" * 100])
def test_non_elf_raises_elf_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notelf.so"
    path.write_bytes(content)
    with pytest.raises(ElfError, match=re.escape(str(path)) + ": not an ELF file"):
        read_dynamic(path)
    assert issubclass(ElfError, ValueError)


# --- Real libraries built with the system compiler -------------------------------------------

C_SRC = """
#include <stdio.h>
#include <string.h>
int greet(const char *who) { return printf("hi %s\\n", who) + (int)strlen(who); }
"""
CXX_SRC = """
#include <condition_variable>
#include <mutex>
#include <sstream>
#include <string>
static std::mutex m;
static std::condition_variable cv;
extern "C" int work(int x) {
    std::unique_lock<std::mutex> lock(m);
    cv.notify_all();
    std::ostringstream out;
    out << std::to_string(x) << std::string("!");
    return (int)out.str().size();
}
"""
OMP_SRC = """
extern "C" double total(const double *x, int n) {
    double s = 0;
    #pragma omp parallel for reduction(+ : s)
    for (int i = 0; i < n; ++i) s += x[i];
    return s;
}
"""
RELR_SRC = """
#include <stdio.h>
static int a, b, c;
int *table[] = {&a, &b, &c, &a, &b, &c};
int *get(int i) { printf("%d", i); return table[i]; }
"""
LIBS = {
    "c": ("libplain.so", C_SRC, ["-x", "c"]),
    "cxx": ("libcxx.so", CXX_SRC, ["-x", "c++"]),
    "omp": ("libomp_user.so", OMP_SRC, ["-x", "c++", "-fopenmp"]),
    "relr": ("librelr.so", RELR_SRC, ["-x", "c", "-Wl,-z,pack-relative-relocs"]),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The libraries of LIBS that this machine's g++ can build (relr needs binutils >= 2.38)."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++) on PATH")
    out = tmp_path_factory.mktemp("libs")
    paths = {}
    for key, (name, src, flags) in LIBS.items():
        source = out / f"{name}.src"
        source.write_text(src)
        cmd = [cxx, "-shared", "-fPIC", "-O1", *flags, str(source), "-o", str(out / name)]
        if key == "omp":
            cmd.append("-lgomp")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode == 0:
            paths[key] = out / name
        elif key != "relr":
            pytest.fail(f"{' '.join(cmd)} failed:\n{proc.stderr}")
    return paths


def _lib(built: dict[str, Path], key: str) -> Path:
    if key not in built:
        pytest.skip(f"the system toolchain cannot build the {key} library")
    return built[key]


def _pyelftools_deps(elffile_mod, path: Path) -> tuple[tuple[str, ...], dict[str, frozenset[str]]]:  # type: ignore[no-untyped-def]
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.gnuversions import GNUVerNeedSection

    needed: list[str] = []
    versions: dict[str, frozenset[str]] = {}
    with open(path, "rb") as f:
        elf = elffile_mod.ELFFile(f)
        for sec in elf.iter_sections():
            if isinstance(sec, DynamicSection):
                needed += [t.needed for t in sec.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
            elif isinstance(sec, GNUVerNeedSection):
                for verneed, aux in sec.iter_versions():
                    versions[verneed.name] = frozenset(a.name for a in aux)
    return tuple(needed), versions


@pytest.mark.parametrize("key", list(LIBS))
def test_real_library_matches_pyelftools_and_readelf(built: dict[str, Path], key: str) -> None:
    path = _lib(built, key)
    deps = read_dynamic(path)
    assert deps.machine == _host_machine()
    elffile = pytest.importorskip("elftools.elf.elffile")
    assert (deps.needed, deps.versions) == _pyelftools_deps(elffile, path)
    if readelf := shutil.which("readelf"):
        dyn = subprocess.run([readelf, "-dW", str(path)], capture_output=True, text=True, check=True).stdout
        assert deps.needed == tuple(re.findall(r"\(NEEDED\).*\[(.+?)\]", dyn))
        assert deps.relr == ("(RELR)" in dyn)
    if key != "omp":  # (-fopenmp code that calls nothing in libc needs only libgomp, with --as-needed)
        assert "libc.so.6" in deps.needed and deps.versions["libc.so.6"]
    if key == "cxx":
        assert "libstdc++.so.6" in deps.needed
        assert any(v.startswith("GLIBCXX_") for v in deps.versions["libstdc++.so.6"])
    if key == "omp":
        assert "libgomp.so.1" in deps.needed
    if key == "relr":
        assert deps.relr and "GLIBC_ABI_DT_RELR" in deps.versions["libc.so.6"]


def _host_machine() -> str:
    import platform

    return platform.machine()


def _write_wheel(directory: Path, lib: Path, arch: str) -> Path:
    """A minimal platlib wheel holding ``lib``, for auditwheel to analyse."""
    dist = "aotptag-0.1.dist-info"
    files = {
        f"aotptag/{lib.name}": lib.read_bytes(),
        "aotptag/__init__.py": b"",
        f"{dist}/METADATA": b"Metadata-Version: 2.1\nName: aotptag\nVersion: 0.1\n",
        f"{dist}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-linux_{arch}\n"
        ).encode(),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = directory / f"aotptag-0.1-py3-none-linux_{arch}.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


def _auditwheel(tmp_path: Path, lib: Path, exclude: frozenset[str] = frozenset()):  # type: ignore[no-untyped-def]
    pytest.importorskip("auditwheel")
    from auditwheel.wheel_abi import analyze_wheel_abi

    wheel = _write_wheel(tmp_path, lib, _host_machine())
    return analyze_wheel_abi(None, None, wheel, exclude, disable_isa_ext_check=True, allow_graft=False)


def _floor(auditwheel_tag: str) -> str:
    """auditwheel's tag, raised to manylinux_2_17: the table leaves out manylinux_2_5 and _2_12."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(.+)", auditwheel_tag)
    return f"manylinux_2_17_{m[2]}" if m and int(m[1]) < 17 else auditwheel_tag


@pytest.mark.parametrize("key", ["c", "cxx", "relr"])
def test_tag_equals_auditwheel(tmp_path: Path, built: dict[str, Path], key: str) -> None:
    path = _lib(built, key)
    info = _auditwheel(tmp_path, path)
    ours = platform_tag([read_dynamic(path)])
    assert ours == _floor(info.sym_policy.name)  # "This constrains the platform tag to ..."
    assert ours == _floor(info.overall_policy.name)  # nothing to graft: the whitelist agrees too
    if key == "relr":
        assert int(ours.split("_")[2]) >= 36


def test_omp_tag_equals_auditwheel_when_libgomp_is_provided(tmp_path: Path, built: dict[str, Path]) -> None:
    path = _lib(built, "omp")
    deps = read_dynamic(path)
    with pytest.raises(PlatformTagError, match=r"libomp_user\.so needs libgomp\.so\.1.*bundled"):
        platform_tag([deps])
    (tmp_path / "w1").mkdir()
    (tmp_path / "w2").mkdir()
    # auditwheel agrees: without grafting libgomp into the wheel, no manylinux tag
    assert _auditwheel(tmp_path / "w1", path).overall_policy.name == f"linux_{_host_machine()}"
    info = _auditwheel(tmp_path / "w2", path, exclude=frozenset({"libgomp.so.1"}))
    assert platform_tag([deps], provided={"libgomp.so.1"}) == _floor(info.sym_policy.name)


# --- Policy table vs auditwheel's JSON -------------------------------------------------------


def _num(version: str) -> bool:
    return bool(re.fullmatch(r"\d+(\.\d+)*", version))


def test_table_agrees_with_auditwheel_json() -> None:
    auditwheel = pytest.importorskip("auditwheel")
    policies = json.loads((Path(auditwheel.__file__).parent / "policy" / "manylinux-policy.json").read_text())
    kept = {
        int(p["name"].split("_")[2]): p
        for p in policies
        if p["name"].startswith("manylinux_") and p["name"] not in ("manylinux_2_5", "manylinux_2_12")
    }
    assert sorted(kept) == sorted(pt._MAXIMA), "auditwheel knows other policies: regenerate the table"
    universe: dict[tuple[str, str], set[str]] = {}
    for p in kept.values():
        for arch, families in p["symbol_versions"].items():
            for family, versions in families.items():
                universe.setdefault((arch, family), set()).update(f"{family}_{v}" for v in versions)
    for minor, p in kept.items():
        assert set(p["lib_whitelist"]) == pt._WHITELIST - pt._NOT_WHITELISTED.get(minor, frozenset()), minor
        for arch in pt._ARCHES:
            families = p["symbol_versions"][arch]
            assert set(families) <= set(pt._FAMILIES)
            for family in pt._FAMILIES:
                where = f"manylinux_2_{minor}_{arch} {family}"
                assert family in families, where
                expected = {f"{family}_{v}" for v in families[family]}
                ours = {v for v in universe[(arch, family)] if pt._allows(minor, arch, v)}
                assert ours == expected, where
                assert not {v for v in expected if _num(v.partition("_")[2])} - {
                    v for v in universe[(arch, family)] if _num(v.partition("_")[2])
                }


def test_table_is_monotonic() -> None:
    """Each policy allows everything an older one does (PEP 600): what makes 'lowest' meaningful."""
    minors = sorted(pt._MAXIMA)
    for arch in pt._ARCHES:
        for old, new in itertools.pairwise(minors):
            rows = (pt._MAXIMA[minor].get(arch, pt._MAXIMA[minor]["*"]) for minor in (old, new))
            for family, a, b in zip(pt._FAMILIES, *rows, strict=True):
                if a is not None and b is not None:
                    assert pt._key(a) <= pt._key(b), (arch, family, old, new)


# --- platform_tag() on synthetic dependencies --------------------------------------------------


def lib(
    needed: tuple[str, ...] = ("libc.so.6",),
    *,
    path: str = "/w/lib.so",
    machine: str = "x86_64",
    relr: bool = False,
    **by_file: list[str],
) -> ElfDeps:
    files = {name.replace("__", "."): frozenset(v) for name, v in by_file.items()}
    return ElfDeps(path=path, machine=machine, needed=needed, versions=files, relr=relr)


@pytest.mark.parametrize(
    ("versions", "expected"),
    [
        (["GLIBC_2.2.5"], "manylinux_2_17_x86_64"),
        (["GLIBC_2.17", "GLIBCXX_3.4.19", "CXXABI_TM_1"], "manylinux_2_17_x86_64"),
        (["GLIBCXX_3.4.21"], "manylinux_2_24_x86_64"),
        (["GLIBC_2.17", "GCC_7.0.0"], "manylinux_2_27_x86_64"),  # x86_64's 2_26 stops at GCC_4.8.0
        (["GLIBC_2.28", "GLIBCXX_3.4.24"], "manylinux_2_28_x86_64"),
        (["GLIBC_2.32", "GLIBC_2.34", "GLIBCXX_3.4.30"], "manylinux_2_35_x86_64"),
        (["GLIBC_ABI_DT_RELR"], "manylinux_2_36_x86_64"),
        (["GLIBC_2.17", "LIBATOMIC_1.0"], "manylinux_2_24_x86_64"),  # x86_64's 2_17 lists no LIBATOMIC
        (["GLIBC_2.41", "GOMP_5.0", "OMP_1.0"], "manylinux_2_41_x86_64"),  # unknown families ignored
    ],
)
def test_tag_from_versions(versions: list[str], expected: str) -> None:
    assert platform_tag([lib(("libc.so.6", "libstdc++.so.6"), libc__so__6=versions)]) == expected


def test_lowest_tag_over_all_libraries_and_relr_flag() -> None:
    old = lib(path="/w/a.so", libc__so__6=["GLIBC_2.17"])
    new = lib(path="/w/b.so", libc__so__6=["GLIBC_2.31"])
    assert platform_tag([old]) == "manylinux_2_17_x86_64"
    assert platform_tag([old, new]) == "manylinux_2_31_x86_64"
    # DT_RELR without the GLIBC_ABI_DT_RELR verneed (an older linker): still needs glibc 2.36
    assert platform_tag([lib(relr=True, libc__so__6=["GLIBC_2.17"])]) == "manylinux_2_36_x86_64"


def test_loader_needed_is_fine_but_its_versions_count() -> None:
    """Unlike auditwheel, versions from ld.so count: _dl_find_object@GLIBC_2.35 is real."""
    base = lib(("libc.so.6", "ld-linux-x86-64.so.2"), libc__so__6=["GLIBC_2.17"])
    assert platform_tag([base]) == "manylinux_2_17_x86_64"
    loader = dict(base.versions, **{"ld-linux-x86-64.so.2": frozenset({"GLIBC_2.35"})})
    assert platform_tag([ElfDeps(base.path, base.machine, base.needed, loader)]) == "manylinux_2_35_x86_64"


def test_libmvec_needs_2_24() -> None:
    assert (
        platform_tag([lib(("libc.so.6", "libmvec.so.1"), libc__so__6=["GLIBC_2.17"])])
        == "manylinux_2_24_x86_64"
    )


def test_unknown_needed_soname_raises() -> None:
    with pytest.raises(PlatformTagError, match=r"/w/lib\.so needs libtorch_cpu\.so.*bundled"):
        platform_tag([lib(("libtorch_cpu.so", "libc.so.6"))])


def test_provided_makes_torch_libraries_acceptable() -> None:
    one = lib(
        ("libtorch_cpu.so", "libc10.so", "libgomp.so.1", "libc.so.6"),
        libc__so__6=["GLIBC_2.34"],
        libgomp__so__1=["GOMP_4.0"],
    )
    assert (
        platform_tag([one], provided={"libtorch_cpu.so", "libc10.so", "libgomp.so.1"})
        == "manylinux_2_34_x86_64"
    )


def test_libraries_of_the_wheel_provide_each_other() -> None:
    a = ElfDeps(path="/w/pkg/liba.so", machine="x86_64", needed=("libb.so.2", "libc.so.6"))
    b = ElfDeps(path="/w/pkg/libb.so", machine="x86_64", needed=("libc.so.6",), soname="libb.so.2")
    assert platform_tag([a, b]) == "manylinux_2_17_x86_64"
    with pytest.raises(PlatformTagError, match=r"libb\.so\.2"):
        platform_tag([a])


@pytest.mark.parametrize("version", ["GLIBC_2.99", "GLIBCXX_3.4.99", "GLIBC_PRIVATE", "CXXABI_LDBL_1.3"])
def test_too_new_version_raises(version: str) -> None:
    with pytest.raises(
        PlatformTagError, match=r"/w/lib\.so requires symbol version\(s\) " + re.escape(version)
    ):
        platform_tag([lib(libc__so__6=["GLIBC_2.17", version])])


def test_arch_specific_rows() -> None:
    # CXXABI_LDBL_1.3 exists on ppc64le/s390x (not x86_64); aarch64's 2_17 allows GLIBC_2.18
    assert platform_tag([lib(machine="ppc64le", libstdcxx=["CXXABI_LDBL_1.3"])]) == "manylinux_2_17_ppc64le"
    assert platform_tag([lib(machine="aarch64", libc__so__6=["GLIBC_2.18"])]) == "manylinux_2_17_aarch64"
    assert platform_tag([lib(machine="x86_64", libc__so__6=["GLIBC_2.18"])]) == "manylinux_2_24_x86_64"


def test_mixed_or_unknown_architectures_raise() -> None:
    with pytest.raises(
        PlatformTagError, match=r"different architectures: /w/a\.so \(x86_64\), /w/b\.so \(aarch64\)"
    ):
        platform_tag([lib(path="/w/a.so"), lib(path="/w/b.so", machine="aarch64")])
    with pytest.raises(PlatformTagError, match="no manylinux policy for architecture 'riscv32'"):
        platform_tag([lib(machine="riscv32")])
    with pytest.raises(PlatformTagError, match="no shared libraries"):
        platform_tag([])


# --- torch_provided_libs() ---------------------------------------------------------------------


def test_torch_provided_libs_fake_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib_dir = tmp_path / "torch" / "lib"
    lib_dir.mkdir(parents=True)
    (lib_dir / "libtorch_cuda.so").write_bytes(
        make_elf(needed=("libcudart.so.12", "libc10.so"), soname="libtorch_cuda.so")
    )
    (lib_dir / "libbroken.so").write_bytes(b"not elf")  # listed, never fatal
    (lib_dir / "README.txt").write_text("not a library")
    spec = importlib.machinery.ModuleSpec("torch", None, is_package=True)
    spec.submodule_search_locations = [str(tmp_path / "torch")]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec if name == "torch" else None)
    assert torch_provided_libs() == {
        "libtorch_cuda.so",
        "libcudart.so.12",
        "libc10.so",
        "libbroken.so",
        "libcuda.so.1",
    }
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert torch_provided_libs() == set()


def test_torch_provided_libs_installed_torch() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch not installed")
    provided = torch_provided_libs()
    assert {"libtorch_cpu.so", "libc10.so", "libcuda.so.1"} <= provided
