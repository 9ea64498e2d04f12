"""A minimal ELF reader: just what a wheel's platform tag depends on.

Tagging a wheel honestly needs, per shipped shared library, its architecture, its DT_NEEDED
sonames and the symbol versions it requires (``.gnu.version_r``). auditwheel gets these with
pyelftools; aot_build must not depend on either at build time, so this module reads them with
``struct`` alone. Only section headers are used (``sh_link`` names the string table), so no
virtual-address-to-file-offset translation through program headers is needed.

Files are read with seeks, never whole: torch's own libraries can be gigabytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

__all__ = ["ElfDeps", "ElfError", "read_dynamic", "symbols_by_version"]

_MAGIC = b"\x7fELF"
_ELFCLASS32, _ELFCLASS64 = 1, 2
_ELFDATA2LSB, _ELFDATA2MSB = 1, 2

_SHT_STRTAB = 3
_SHT_DYNAMIC = 6
_SHT_DYNSYM = 11
_SHT_GNU_VERSYM = 0x6FFFFFFF
_SHT_NOTE = 7
_NT_GNU_BUILD_ID = 3
_SHT_GNU_VERNEED = 0x6FFFFFFE

_DT_NULL = 0
_DT_NEEDED = 1
_DT_SONAME = 14
_DT_RELR = 36

# e_machine -> name, or (32-bit name, 64-bit name) where the class decides.
# Names follow the platform-tag spelling (`uname -m` of the matching Linux).
_MACHINES: dict[int, str | tuple[str, str]] = {
    3: "i686",  # EM_386
    8: ("mips", "mips64"),  # EM_MIPS
    20: "ppc",  # EM_PPC
    21: "ppc64",  # EM_PPC64 (little endian: ppc64le, see below)
    22: ("s390", "s390x"),  # EM_S390
    40: "armv7l",  # EM_ARM
    62: ("x32", "x86_64"),  # EM_X86_64 (ELFCLASS32 is the x32 ABI)
    183: "aarch64",  # EM_AARCH64
    243: ("riscv32", "riscv64"),  # EM_RISCV
    258: "loongarch64",  # EM_LOONGARCH
}


class ElfError(ValueError):
    """The file is not an ELF file, or is truncated or malformed."""


@dataclass(frozen=True)
class ElfDeps:
    """What the dynamic loader will require of the system to load one ELF file.

    ``versions`` maps the file a version is needed from (``"libc.so.6"``) to the version
    names needed (``{"GLIBC_2.34", "GLIBC_2.2.5"}``); ``relr`` is true when the dynamic
    section has DT_RELR (packed relative relocations, which need glibc >= 2.36).
    """

    path: str
    machine: str
    needed: tuple[str, ...] = ()
    versions: dict[str, frozenset[str]] = field(default_factory=dict, hash=False)
    relr: bool = False
    soname: str | None = None


@dataclass(frozen=True)
class _Section:
    index: int
    type: int
    offset: int
    size: int
    link: int
    info: int


class _Reader:
    """Bounds-checked reads, so malformed input raises ElfError rather than struct.error."""

    def __init__(self, f: BinaryIO, path: str, size: int) -> None:
        self.f, self.path, self.size = f, path, size
        self.endian = "<"
        self.is64 = True

    def fail(self, what: str) -> ElfError:
        return ElfError(f"{self.path}: {what}")

    def read(self, offset: int, length: int, what: str) -> bytes:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise self.fail(
                f"truncated or malformed ELF: {what} (bytes {offset}..{offset + length}) "
                f"lies beyond the end of the file ({self.size} bytes)"
            )
        self.f.seek(offset)
        data = self.f.read(length)
        if len(data) != length:  # the file shrank under us
            raise self.fail(f"truncated ELF: short read of {what}")
        return data

    def unpack(self, fmt: str, data: bytes, offset: int = 0) -> tuple[int, ...]:
        return struct.unpack_from(self.endian + fmt, data, offset)


def _cstr(r: _Reader, table: bytes, offset: int, what: str) -> str:
    if not 0 <= offset < len(table):
        raise r.fail(f"malformed ELF: {what} string offset {offset} outside its string table")
    end = table.find(b"\0", offset)
    if end < 0:
        raise r.fail(f"malformed ELF: {what} string at offset {offset} is not NUL-terminated")
    return table[offset:end].decode("utf-8", errors="replace")


def _machine(e_machine: int, is64: bool, little: bool) -> str:
    entry = _MACHINES.get(e_machine)
    if entry is None:
        return f"unknown-e_machine-{e_machine}"
    name = entry[is64] if isinstance(entry, tuple) else entry
    if name == "ppc64" and little:
        return "ppc64le"
    if name in ("aarch64", "armv7l") and not little:
        return {"aarch64": "aarch64_be", "armv7l": "armv7b"}[name]
    if name.startswith("mips") and little:
        return name + "el"
    return name


def _sections(r: _Reader, is64: bool, shoff: int, shentsize: int, shnum: int) -> list[_Section]:
    fmt = "IIQQQQIIQQ" if is64 else "IIIIIIIIII"
    need = struct.calcsize(fmt)
    if shoff == 0:
        raise r.fail("ELF file has no section headers (stripped with sstrip?); cannot read its dependencies")
    if shentsize < need:
        raise r.fail(f"malformed ELF: e_shentsize {shentsize} < {need}")
    if shnum == 0:  # extended numbering: the real count is section 0's sh_size
        shnum = r.unpack(fmt, r.read(shoff, need, "section header 0"))[5]
    table = r.read(shoff, shnum * shentsize, f"section header table ({shnum} entries)")
    out = []
    for i in range(shnum):
        _name, typ, _flags, _addr, off, size, link, info, _align, _entsize = r.unpack(
            fmt, table, i * shentsize
        )
        out.append(_Section(i, typ, off, size, link, info))
    return out


def _section_data(r: _Reader, sec: _Section, what: str) -> bytes:
    return r.read(sec.offset, sec.size, f"{what} (section {sec.index})")


def _linked_strtab(r: _Reader, sections: list[_Section], sec: _Section, what: str) -> bytes:
    if not 0 < sec.link < len(sections):
        raise r.fail(f"malformed ELF: {what} (section {sec.index}) links to bad section {sec.link}")
    strtab = sections[sec.link]
    if strtab.type != _SHT_STRTAB:
        raise r.fail(f"malformed ELF: {what} links to section {sec.link}, which is not a string table")
    return _section_data(r, strtab, f"string table of {what}")


def _read_verneed(
    r: _Reader, sections: list[_Section], sec: _Section, indices: dict[int, str] | None = None
) -> dict[str, frozenset[str]]:
    """File -> version names needed from it; ``indices`` (when given) receives each needed
    version's index (``vna_other``, what ``.gnu.version`` entries refer to) -> its name."""
    data = _section_data(r, sec, ".gnu.version_r")
    strtab = _linked_strtab(r, sections, sec, ".gnu.version_r")
    versions: dict[str, set[str]] = {}
    off = 0
    # sh_info is the number of entries; 0 (never written by real linkers) means "follow vn_next".
    remaining = sec.info or len(data) // 16
    while remaining > 0:
        if off + 16 > len(data):  # offsets only grow (vn_next > 0), so this also ends the walk
            raise r.fail(f"malformed ELF: .gnu.version_r entry at offset {off} is outside the section")
        _vn_version, vn_cnt, vn_file, vn_aux, vn_next = r.unpack("HHIII", data, off)
        names = versions.setdefault(_cstr(r, strtab, vn_file, "version-needed file"), set())
        aux = off + vn_aux
        for _ in range(vn_cnt):
            if aux + 16 > len(data):
                raise r.fail(
                    f"malformed ELF: .gnu.version_r auxiliary entry at offset {aux} is outside the section"
                )
            _hash, _flags, other, vna_name, vna_next = r.unpack("IHHII", data, aux)
            name = _cstr(r, strtab, vna_name, "version-needed name")
            names.add(name)
            if indices is not None:
                indices[other & 0x7FFF] = name
            if vna_next == 0:
                break
            aux += vna_next
        remaining -= 1
        if vn_next == 0:
            break
        off += vn_next
    return {k: frozenset(v) for k, v in versions.items()}


def _open(f: BinaryIO, name: str) -> tuple[_Reader, str, list[_Section]]:
    """Check the identification and header; the reader, architecture name and sections."""
    f.seek(0, 2)
    r = _Reader(f, name, f.tell())
    ident = r.read(0, min(16, r.size), "ELF identification")
    if ident[:4] != _MAGIC:
        raise r.fail(f"not an ELF file (starts with {ident[:4]!r})")
    if len(ident) < 16:
        raise r.fail(f"truncated ELF: only {r.size} bytes")
    ei_class, ei_data = ident[4], ident[5]
    if ei_class not in (_ELFCLASS32, _ELFCLASS64):
        raise r.fail(f"malformed ELF: bad EI_CLASS {ei_class}")
    if ei_data not in (_ELFDATA2LSB, _ELFDATA2MSB):
        raise r.fail(f"malformed ELF: bad EI_DATA {ei_data}")
    is64, little = ei_class == _ELFCLASS64, ei_data == _ELFDATA2LSB
    r.endian = "<" if little else ">"
    r.is64 = is64
    ehdr_fmt = "HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH"
    ehdr = r.read(16, struct.calcsize(ehdr_fmt), "ELF header")
    _type, e_machine, _ver, _entry, _phoff, shoff, _flags, _ehsize, _phes, _phn, shentsize, shnum, _ = (
        r.unpack(ehdr_fmt, ehdr)
    )
    return r, _machine(e_machine, is64, little), _sections(r, is64, shoff, shentsize, shnum)


def build_id_span(path: str | Path) -> tuple[int, int] | None:
    """File offset and length of the GNU build ID (NT_GNU_BUILD_ID note), or None."""
    with open(path, "rb") as f:
        r, _machine_name, sections = _open(f, str(path))
        for sec in sections:
            if sec.type != _SHT_NOTE:
                continue
            data = _section_data(r, sec, "note")
            off = 0
            while off + 12 <= len(data):
                namesz, descsz, kind = r.unpack("III", data, off)
                name_at = off + 12
                desc_at = name_at + (namesz + 3) // 4 * 4
                if desc_at + descsz > len(data):
                    raise r.fail(f"malformed ELF: note in section {sec.index} runs past its end")
                if kind == _NT_GNU_BUILD_ID and data[name_at : name_at + namesz] == b"GNU\0":
                    return sec.offset + desc_at, descsz
                off = desc_at + (descsz + 3) // 4 * 4
    return None


def read_dynamic(path: str | Path) -> ElfDeps:
    """Read the architecture, DT_NEEDED, DT_SONAME, DT_RELR and needed symbol versions of an ELF file.

    A file without a dynamic section (static, or an object file) yields no dependencies.
    Raises ElfError for anything that is not a well-formed ELF file; OSError if unreadable.
    """
    name = str(path)
    with open(path, "rb") as f:
        r, machine, sections = _open(f, name)

        needed: list[str] = []
        soname: str | None = None
        relr = False
        dyn_fmt = "qQ" if r.is64 else "iI"
        dyn_size = struct.calcsize(dyn_fmt)
        for sec in sections:
            if sec.type != _SHT_DYNAMIC:
                continue
            data = _section_data(r, sec, ".dynamic")
            strtab = _linked_strtab(r, sections, sec, ".dynamic")
            for off in range(0, len(data) - dyn_size + 1, dyn_size):
                tag, val = r.unpack(dyn_fmt, data, off)
                if tag == _DT_NULL:
                    break
                if tag == _DT_NEEDED:
                    needed.append(_cstr(r, strtab, val, "DT_NEEDED"))
                elif tag == _DT_SONAME:
                    soname = _cstr(r, strtab, val, "DT_SONAME")
                elif tag == _DT_RELR:
                    relr = True

        versions: dict[str, frozenset[str]] = {}
        for sec in sections:
            if sec.type == _SHT_GNU_VERNEED:
                for file, names in _read_verneed(r, sections, sec).items():
                    versions[file] = versions.get(file, frozenset()) | names

    return ElfDeps(
        path=name, machine=machine, needed=tuple(needed), versions=versions, relr=relr, soname=soname
    )


def symbols_by_version(path: str | Path) -> dict[str, frozenset[str]]:
    """Each symbol version the file needs (``"GLIBC_2.34"``) -> the undefined dynamic symbols
    that need it (``pthread_rwlock_rdlock``...): what to name when a version is too new.

    Reads ``.dynsym``, ``.gnu.version`` and ``.gnu.version_r``; a file without them needs none.
    Raises ElfError for anything that is not a well-formed ELF file; OSError if unreadable.
    """
    name = str(path)
    with open(path, "rb") as f:
        r, _machine_name, sections = _open(f, name)
        indices: dict[int, str] = {}
        for sec in sections:
            if sec.type == _SHT_GNU_VERNEED:
                _read_verneed(r, sections, sec, indices)
        dynsym = next((s for s in sections if s.type == _SHT_DYNSYM), None)
        versym = next((s for s in sections if s.type == _SHT_GNU_VERSYM), None)
        if dynsym is None or versym is None or not indices:
            return {}
        syms = _section_data(r, dynsym, ".dynsym")
        strtab = _linked_strtab(r, sections, dynsym, ".dynsym")
        versions = _section_data(r, versym, ".gnu.version")
        # Elf64_Sym: name, info, other, shndx, value, size; Elf32_Sym: name, value, size, info, other, shndx
        fmt, size = ("IBBHQQ", 24) if r.is64 else ("IIIBBH", 16)
        out: dict[str, set[str]] = {}
        for i in range(min(len(syms) // size, len(versions) // 2)):
            fields = r.unpack(fmt, syms, i * size)
            st_name, shndx = fields[0], (fields[3] if r.is64 else fields[5])
            version = indices.get(r.unpack("H", versions, i * 2)[0] & 0x7FFF)
            if shndx == 0 and version is not None and st_name:  # SHN_UNDEF: needed from elsewhere
                out.setdefault(version, set()).add(_cstr(r, strtab, st_name, "dynamic symbol"))
    return {k: frozenset(v) for k, v in out.items()}
