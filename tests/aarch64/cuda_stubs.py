"""Stand-ins for the CUDA libraries torch's aarch64 wheel links against, so that it imports on
a machine without them (here: qemu-user on an x86-64 host).

torch 2.13's aarch64 wheel on PyPI is a CUDA build: even ``libtorch_cpu.so`` needs
``libcudart.so.13`` and ``libcupti.so.13``, and ``libtorch.so`` needs ``libtorch_cuda.so``,
which needs cuDNN, cuBLAS, NCCL... from ``nvidia-*`` wheels, some of which (nvidia-cudnn-cu13
for aarch64) this machine's package index does not have. CPU code never calls them, so each
missing library is replaced by one exporting the symbols torch's libraries need from it, under
the same version names, as functions returning a pointer to zeroed memory (non-zero: an error
code where a status is expected; torch then reports no CUDA device) or as zeroed data. Nothing
of aot_build or of torch's CPU code is replaced.

Usage: ``python cuda_stubs.py TORCH_LIB_DIR OUT_DIR [CC]`` (CC: ``aarch64-linux-gnu-gcc``).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

#: Every stub function returns this: a valid, zeroed buffer.
ZERO = (
    "static char aot_build_stub_zero_buf[4096] __attribute__((aligned(64)));\n"
    "#define aot_build_stub_zero ((void*)aot_build_stub_zero_buf)\n"
)
#: The CUDA libraries' own symbol names (unversioned references to anything else, libstdc++
#: or Python's C API, are the system's and the interpreter's: never stubbed).
CUDA_NAMES = re.compile(r"^(cu|CU|nccl|nvshmem|nvtx|nvrtc|cupti)")
#: Libraries the system (glibc, gcc's runtime, zlib) provides: never stubbed.
SYSTEM = re.compile(r"^(libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libz|ld-linux.*)\.so")


def _readelf(tool: str, *args: str) -> str:
    return subprocess.run([tool, "-W", *args], capture_output=True, text=True, check=True).stdout


def _definition(name: str, kind: str) -> str:
    if kind == "OBJECT":
        return f"char {name}[256];\n"
    return f"void* {name}(void) {{ return aot_build_stub_zero; }}\n"


def _link(cc: str, out: Path, source: str, soname: str, script: Path | None = None) -> Path:
    src = out.with_name(out.name + ".c")
    src.write_text(ZERO + source, encoding="utf-8")
    cmd = [cc, "-shared", "-fPIC", "-w", "-o", str(out), str(src), f"-Wl,-soname,{soname}"]
    subprocess.run([*cmd, *([f"-Wl,--version-script={script}"] if script else [])], check=True)
    return out


def build(lib_dir: Path, out_dir: Path, cc: str = "aarch64-linux-gnu-gcc") -> list[Path]:
    """Write the stand-ins into ``out_dir`` (put it on ``LD_LIBRARY_PATH``); their paths."""
    readelf = cc.rsplit("-", 1)[0] + "-readelf" if "-" in cc else "readelf"
    out_dir.mkdir(parents=True, exist_ok=True)
    present = {p.name for p in lib_dir.iterdir()}
    versioned: dict[str, dict[str, dict[str, str]]] = defaultdict(lambda: defaultdict(dict))
    needed: set[str] = set()
    defined: set[str] = set()
    unversioned: dict[str, str] = {}
    for lib in sorted(lib_dir.glob("*.so*")):
        needed |= set(re.findall(r"Shared library: \[(.+?)\]", _readelf(readelf, "-d", str(lib))))
        version_file: dict[str, str] = {}
        current = ""
        for line in _readelf(readelf, "-V", str(lib)).splitlines():
            found = re.search(r"File: (\S+)", line)
            current = found.group(1) if found else current
            name = re.search(r"Name: (\S+)", line)
            if name and current:
                version_file[name.group(1)] = current
        for line in _readelf(readelf, "--dyn-syms", str(lib)).splitlines():
            parts = line.split()
            if len(parts) < 8 or not parts[0].rstrip(":").isdigit():
                continue
            symbol, _, version = parts[7].partition("@")
            version = version.lstrip("@").split(" ")[0]
            if parts[6] != "UND":
                defined.add(symbol)
            elif version:
                file = version_file.get(version, "")
                if file and file not in present and not SYSTEM.match(file):
                    versioned[file][version][symbol] = parts[3]
            elif parts[4] == "GLOBAL" and CUDA_NAMES.match(symbol):
                unversioned[symbol] = parts[3]
    made = []
    for soname, versions in sorted(versioned.items()):
        script = out_dir / f"{soname}.map"
        nodes = [f"{v} {{ global: {'; '.join(sorted(s))}; }};\n" for v, s in versions.items()]
        script.write_text("".join(nodes), encoding="utf-8")
        source = "".join(_definition(n, k) for syms in versions.values() for n, k in sorted(syms.items()))
        made.append(_link(cc, out_dir / soname, source, soname, script))
    # needed libraries whose symbols carry no version, so cannot be told apart: each exports
    # every unversioned CUDA symbol torch's libraries need and none of them defines
    rest = "".join(_definition(n, unversioned[n]) for n in sorted(set(unversioned) - defined))
    for soname in sorted(needed - present - set(versioned)):
        if not SYSTEM.match(soname):
            made.append(_link(cc, out_dir / soname, rest, soname))
    return made


if __name__ == "__main__":
    cc = sys.argv[3] if len(sys.argv) > 3 else "aarch64-linux-gnu-gcc"
    print("\n".join(p.name for p in build(Path(sys.argv[1]), Path(sys.argv[2]), cc)))
