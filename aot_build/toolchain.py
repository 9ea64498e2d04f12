"""The C++ compiler as compile workers call it: build paths mapped out of the library.

AOTInductor compiles sources it writes into its cache folder under names hashed from their
compile command (which holds torch's include path), and torch's headers use ``__FILE__``: the
library embeds the cache folder's path, the source's hashed name and torch's install path (a
temporary folder in an isolated ``python -m build``), so two builds of the same program
differ. A small wrapper put first on the workers' ``PATH``, under the compiler's own name,
adds ``-ffile-prefix-map`` for all three; Inductor keeps calling the bare compiler name.

The wrapper also holds the build's *manylinux floor* (:func:`floor_args`): libraries it links
need no newer glibc and libstdc++ than the floor's policy allows (``manylinux_2_28`` by
default), whatever the build host has. And it links every shared library with
:data:`LINK_ARGS`: calls within the library bound at link time (it loads a little faster).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .constants import ENV_CROSS_TORCH, ENV_MANYLINUX

#: Where the mapped paths point in a library (fixed, so builds agree).
INDUCTOR_PREFIX = "/aot-build/inductor"
TORCH_PREFIX = "/aot-build/torch"
SOURCE_PREFIX = "/aot-build/source"

#: Added to the command line of every shared library the wrapper links. ``-Bsymbolic-functions``:
#: the library's calls of functions it defines itself (AOTInductor's runtime and the C++
#: templates it instantiates: ~230 of a small model's ~340 PLT slots) are bound when it is
#: linked, not looked up through every library torch has loaded (~100) when it is loaded or
#: first calls them. Measured on the benchmark's models (fresh processes, idle machine): loading
#: a library 0.05-0.08 ms faster, its first run the same; data (a header's static variables,
#: ``typeinfo``) stays shared with torch's copies.
LINK_ARGS = ("-Wl,-Bsymbolic-functions",)


def real_compiler() -> str:
    """Absolute path of the C++ compiler Inductor would use (``CXX`` or ``g++``)."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    cxx = get_cpp_compiler()
    return shutil.which(cxx) or cxx


def write_wrapper(folder: Path, floor: str | None = None) -> tuple[str, dict[str, str]]:
    """Write the wrapper into ``folder``; return the compiler name to give Inductor
    (``cpp.cxx``) and the environment a worker runs with (its ``PATH``; each worker also
    sets its own ``TORCHINDUCTOR_CACHE_DIR``, which the wrapper maps at run time).

    ``floor``: the manylinux floor of what it links (:func:`floor_args`); None: the
    build's (:func:`build_floor`). Raises FloorError when the compiler cannot meet it."""
    import torch

    real = real_compiler()
    name = Path(real).name
    folder.mkdir(parents=True, exist_ok=True)
    link = floor_args(build_floor() if floor is None else floor, real, folder / "floor").link
    script = folder / name
    torch_dir = str(Path(torch.__file__).resolve().parent)
    cross = cross_torch(real)
    script.write_text(
        "#!/bin/sh\n"
        "# aot_build: the C++ compiler with build paths mapped out of the output (reproducible)\n"
        "# and, where it links a shared library, the manylinux floor's link arguments.\n"
        + (
            "# A cross build: Inductor's paths into this torch point at the target's torch.\n"
            f"host={shlex.quote(torch_dir)}; target={shlex.quote(cross)}; n=$#\n"
            'while [ "$n" -gt 0 ]; do\n'
            "  a=$1; shift; n=$((n - 1))\n"
            '  case $a in *"$host"*) a="${a%%"$host"*}$target${a#*"$host"}";; esac\n'
            '  set -- "$@" "$a"\n'
            "done\n"
            if cross
            else ""
        )
        + "# Inductor names each source by a hash of its command line, which holds torch's include\n"
        "# path: map every source to its plain role (wrapper.cpp, kernel.cpp).\n"
        "link=\n"
        'for a in "$@"; do\n'
        "  case $a in\n"
        '    *.cpp|*.cc|*.c) b=${a##*/}; set -- "$@" "-ffile-prefix-map=$a='
        f'{SOURCE_PREFIX}/${{b#*.}}";;\n'
        "    -shared) link=1;;\n"
        "  esac\n"
        "done\n"
        'for a in "$@"; do case $a in -c|-S|-E) link=;; esac; done\n'
        + f'[ -n "$link" ] && set -- "$@" {shlex.join((*LINK_ARGS, *link))}\n'
        + f"exec {shlex.quote(real)} "
        f'${{TORCHINDUCTOR_CACHE_DIR:+"-ffile-prefix-map=${{TORCHINDUCTOR_CACHE_DIR}}={INDUCTOR_PREFIX}"}} '
        f'{shlex.quote(f"-ffile-prefix-map={cross or torch_dir}={TORCH_PREFIX}")} "$@"\n',
        encoding="utf-8",
    )
    script.chmod(0o755)
    return name, {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


def wrapper_path(folder: Path, floor: str | None = None) -> str:
    """:func:`write_wrapper`, by path: for compiles in a process that has not the wrapper's
    folder on its ``PATH``. Inductor names each precompiled header by a hash of the command
    line, this path included: compiles that should share the headers share one wrapper."""
    name, _ = write_wrapper(folder, floor)
    return str(folder / name)


def cross_torch(compiler: str) -> str:
    """In a cross build, the target's torch folder (``AOT_BUILD_CROSS_TORCH``), once checked
    against ``compiler``; "" otherwise. Raises FloorError when they are for different
    architectures (the compiler is chosen with ``CXX``)."""
    from .targets import cross_arch

    folder = os.environ.get(ENV_CROSS_TORCH, "").strip()
    if not folder:
        return ""
    folder = str(Path(folder).resolve())
    try:
        arch = cross_arch(folder)
    except ValueError as exc:
        raise FloorError(str(exc)) from None
    if compiler_arch(compiler) != arch:
        raise FloorError(
            f"{ENV_CROSS_TORCH}={folder} is torch for {arch}, but the C++ compiler {compiler} builds for "
            f"{compiler_arch(compiler)}; set CXX to a compiler for {arch} (Debian: CXX={arch}-linux-gnu-g++ "
            f"from g++-{arch.replace('_', '-')}-linux-gnu)"
        )
    return folder


def shared_headers() -> str:
    """``$AOT_BUILD_HEADERS_DIR`` (absolute), or "" when unset: the folder where compiles keep
    Inductor's precompiled headers beyond the build.

    A header is named by a hash of its compile command line, which holds torch's install
    path: builds in one environment (``--no-isolation``, a CI job's, a developer's) reuse
    them, and every compile then starts from them (about 10 s saved per program, 20 s per
    target not spent making them); an isolated build (a new environment each time) would only
    add files. Nothing removes them (about 0.15 GB per target and torch install)."""
    from .constants import ENV_HEADERS_DIR

    folder = os.environ.get(ENV_HEADERS_DIR, "").strip()
    return str(Path(folder).resolve()) if folder else ""


def header_folder(work: str) -> str:
    """Where this build's compiles keep their precompiled headers: :func:`shared_headers`,
    else ``work`` (the build's own folder, removed with it)."""
    return shared_headers() or work


def keep_headers_in(folder: str) -> Callable[[], None]:
    """Make Inductor precompile its headers into ``folder`` (this process only); returns what
    undoes it.

    Inductor writes each precompiled header (100-150 MB, one per compile command line) into
    ``<tmp>/torchinductor_<user>/precompiled_headers`` whatever ``TORCHINDUCTOR_CACHE_DIR``
    says, and never removes it; the command line holds torch's path, new in every isolated
    build, so every build left about 0.3 GB per target behind (a CI run filled its disk). In a
    folder of the build's own they are still shared by the compiles of one process, and go
    with the build."""
    from torch._inductor import codecache

    memo: Any = getattr(codecache, "_precompile_header", None)
    if not isinstance(getattr(codecache, "_HEADER_DIR", None), str) or not hasattr(memo, "cache_clear"):
        return lambda: None  # not torch 2.13's layout: leave Inductor as it is
    old = (codecache._HEADER_DIR, codecache._HEADER_LOCK_DIR)
    codecache._HEADER_DIR = os.path.join(folder, "precompiled_headers")
    codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")

    def undo() -> None:
        codecache._HEADER_DIR, codecache._HEADER_LOCK_DIR = old
        memo.cache_clear()  # its answers name files in ``folder``

    return undo


@contextmanager
def headers_in(folder: str) -> Iterator[None]:
    """:func:`keep_headers_in` for the ``with`` block (a process that goes on after it)."""
    undo = keep_headers_in(folder)
    try:
        yield
    finally:
        undo()


# --- The manylinux floor ----------------------------------------------------------------------

#: The floor a build aims at unless told otherwise: torch 2.13's own wheels are manylinux_2_28.
DEFAULT_FLOOR = "2_28"
#: No floor: link as the build host does (libraries need whatever its glibc and libstdc++ are).
HOST_FLOOR = "host"

#: glibc's first symbol version per architecture (what a symbol that existed before the
#: architecture's port has as its oldest version).
_GLIBC_BASE = {"x86_64": "GLIBC_2.2.5", "aarch64": "GLIBC_2.17"}

#: Functions glibc 2.34 moved from libpthread into libc under a new version (GLIBC_2.34), whose
#: old version (the architecture's base) libc still exports: a hidden stub in the library jumps
#: to the old version, which an older glibc serves from libpthread.so.0.
_PTHREAD_MOVED = """
    pthread_attr_getguardsize pthread_attr_getstack pthread_attr_getstacksize
    pthread_attr_setguardsize pthread_attr_setstack pthread_attr_setstacksize pthread_barrier_destroy
    pthread_barrier_init pthread_barrier_wait pthread_barrierattr_destroy pthread_barrierattr_init
    pthread_barrierattr_setpshared pthread_cancel pthread_condattr_getpshared pthread_condattr_setpshared
    pthread_create pthread_detach pthread_getattr_np pthread_getspecific pthread_join pthread_key_create
    pthread_key_delete pthread_kill pthread_mutex_timedlock pthread_mutex_trylock pthread_mutexattr_destroy
    pthread_mutexattr_getpshared pthread_mutexattr_gettype pthread_mutexattr_init pthread_mutexattr_setpshared
    pthread_mutexattr_settype pthread_once pthread_rwlock_destroy pthread_rwlock_init pthread_rwlock_rdlock
    pthread_rwlock_timedrdlock pthread_rwlock_timedwrlock pthread_rwlock_tryrdlock pthread_rwlock_trywrlock
    pthread_rwlock_unlock pthread_rwlock_wrlock pthread_rwlockattr_destroy pthread_rwlockattr_init
    pthread_rwlockattr_setkind_np pthread_setspecific pthread_sigmask pthread_spin_destroy pthread_spin_init
    pthread_spin_lock pthread_spin_trylock pthread_spin_unlock pthread_testcancel sem_destroy sem_getvalue
    sem_init sem_post sem_timedwait sem_trywait sem_wait
""".split()
#: libstdc++ functions whose newest version is beyond manylinux_2_28's GLIBCXX_3.4.24 while an
#: older one (same code, same ABI) is still exported: name -> that version.
_LIBSTDCXX_OLD = {"_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE": "GLIBCXX_3.4.11"}

_JUMP = {"x86_64": "jmp\t{target}@PLT", "aarch64": "b\t{target}"}

# A hidden definition of the variable gcc >= 11's libstdc++ headers read (GLIBC_2.32): 0 says
# "maybe several threads", so reference counts always use atomics (as before glibc 2.32).
_SINGLE_THREADED = """\
\t.bss
\t.globl\t__libc_single_threaded
\t.hidden\t__libc_single_threaded
\t.type\t__libc_single_threaded, STT_OBJECT
\t.size\t__libc_single_threaded, 1
__libc_single_threaded:
\t.zero\t1
\t.section\t.note.GNU-stack,"",%progbits
"""

# Definitions of libstdc++ symbols newer than GLIBCXX_3.4.24 that have no older version, each
# built from older ones: symbol -> (C++ signature, with F for the function's name; body). The
# C++20 / gcc >= 9 members AOTInductor's runtime headers use; anything else is named by the
# floor check.
_SS = "std::__cxx11::basic_{}<char, std::char_traits<char>, std::allocator<char>>"
_STREAM_MODES = {
    "stringbuf": "std::ios_base::in | std::ios_base::out",
    "ostringstream": "std::ios_base::out",
    "istringstream": "std::ios_base::in",
    "stringstream": "std::ios_base::in | std::ios_base::out",
}
_CXX_MEMBERS: dict[str, tuple[str, str]] = {
    # std::__throw_bad_array_new_length() (GLIBCXX_3.4.29): `new T[n]` with a bad n
    "_ZSt28__throw_bad_array_new_lengthv": (
        "[[noreturn]] void F()",
        "{ throw std::bad_array_new_length(); }",
    ),
    # basic_<kind>::str() && (GLIBCXX_3.4.29, C++20): move the string out, leave it empty
    **{
        f"_ZNOSt7__cxx11{len(kind) + 6}basic_{kind}IcSt11char_traitsIcESaIcEE3strEv": (
            f"std::string F({_SS.format(kind)}* self)",
            "{ std::string s = self->str(); self->str(std::string()); return s; }",
        )
        for kind in _STREAM_MODES
    },
    # the default constructors (GLIBCXX_3.4.26): the mode-taking ones (3.4.21), default mode
    **{
        f"_ZNSt7__cxx11{len(kind) + 6}basic_{kind}IcSt11char_traitsIcESaIcEEC1Ev": (
            "void F(void* self)",
            f"{{ ::new (self) {_SS.format(kind)}({mode}); }}",
        )
        for kind, mode in _STREAM_MODES.items()
    },
}
_FLOOR_FORMAT = 2  # bump when the archive's contents change meaning


class FloorError(ValueError):
    """A manylinux floor that is not valid, or that this compiler cannot aim at."""


def parse_floor(text: str, where: str = "manylinux") -> int | None:
    """The glibc minor of a floor (``"2_28"`` -> 28); None for ``"host"``. FloorError names
    ``where`` (the setting or variable that gave it) and the valid values."""
    from .native.platform_tag import policy_minors

    minors = policy_minors()
    if text == HOST_FLOOR:
        return None
    major, _, minor = text.removeprefix("manylinux_").partition("_")
    if major == "2" and minor.isdigit() and int(minor) in minors:
        return int(minor)
    raise FloorError(
        f'{where}: {text!r} is not a manylinux floor; write "{DEFAULT_FLOOR}" (the default, torch\'s '
        f'own), another policy ("2_{minors[0]}" ... "2_{minors[-1]}") or "{HOST_FLOOR}" (whatever '
        "the build host's glibc and libstdc++ need)"
    )


def build_floor(environ: Mapping[str, str] | None = None) -> str:
    """The floor of this build: ``AOT_BUILD_MANYLINUX`` (set for the compile process by the
    setuptools command from ``[tool.aot-build] manylinux``), else :data:`DEFAULT_FLOOR`."""
    env = os.environ if environ is None else environ
    return env.get(ENV_MANYLINUX, "").strip() or DEFAULT_FLOOR


def compiler_arch(compiler: str) -> str:
    """The architecture ``compiler`` builds for (``x86_64``, ``aarch64``), from ``-dumpmachine``."""
    try:
        out = subprocess.run([compiler, "-dumpmachine"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise FloorError(f"cannot run the compiler {compiler!r} ({exc}); install it or set CXX / CC") from exc
    triple = out.stdout.strip()
    if out.returncode != 0 or not triple:
        raise FloorError(f"{compiler} -dumpmachine failed: {out.stderr.strip() or 'no output'}")
    arch = triple.split("-")[0]
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)


def binutil(compiler: str, tool: str) -> str:
    """binutils' ``tool`` for ``compiler``'s target: the one with its prefix
    (``aarch64-linux-gnu-ar`` for ``aarch64-linux-gnu-g++``), else the plain one."""
    base = Path(compiler).name
    for suffix in ("g++", "gcc", "c++", "cc"):
        if base.endswith(suffix) and base != suffix:
            prefixed = shutil.which(base[: -len(suffix)] + tool)
            if prefixed:
                return prefixed
    return shutil.which(tool) or tool


def _floor_sources(arch: str) -> dict[str, tuple[str, str]]:
    """Member name -> (language, source) of the floor archive for ``arch``."""
    base = _GLIBC_BASE[arch]
    jump = _JUMP[arch]
    out: dict[str, tuple[str, str]] = {"single_threaded.s": ("assembler", _SINGLE_THREADED)}
    stubs = [(name, f"{name}@{base}") for name in _PTHREAD_MOVED]
    stubs += [(name, f"{name}@{version}") for name, version in _LIBSTDCXX_OLD.items()]
    for i, (name, versioned) in enumerate(stubs):
        old = f"__aot_build_old_{i}"
        out[f"stub{i}.s"] = (
            "assembler",
            f"\t.text\n\t.globl\t{name}\n\t.hidden\t{name}\n\t.type\t{name}, STT_FUNC\n{name}:\n"
            f"\t{jump.format(target=old)}\n\t.size\t{name}, .-{name}\n\t.symver\t{old}, {versioned}\n"
            '\t.section\t.note.GNU-stack,"",%progbits\n',
        )
    # one member for all of them (a C++ library that needs one needs libstdc++ anyway; a C one
    # never pulls it), so that <sstream> is compiled once
    cxx = "#include <new>\n#include <sstream>\n#include <string>\n"
    for i, (symbol, (signature, body)) in enumerate(_CXX_MEMBERS.items()):
        declaration = signature.replace("F(", f"aot_build_floor_{i}(")
        cxx += f'{declaration} __asm__("{symbol}") __attribute__((visibility("hidden")));\n'
        cxx += f"{declaration} {body}\n"
    out["libstdcxx.cpp"] = ("c++", cxx)
    return out


@dataclass(frozen=True)
class FloorArgs:
    """What to add to a compiler's command lines so that its output needs no more of the
    system than a manylinux floor allows (see :func:`floor_args`).

    ``compile``: for commands that compile (``-c``); ``link``: for commands that link a
    shared library or program, after its own objects and libraries."""

    floor: str
    compile: tuple[str, ...] = ()
    link: tuple[str, ...] = ()


def floor_args(floor: str, compiler: str, folder: Path) -> FloorArgs:
    """The compiler and linker arguments that make what ``compiler`` builds need no newer
    glibc, libstdc++ and libgcc than manylinux ``floor`` allows, on a newer build host.

    Usable for any compiled artifact of a wheel, C or C++: ``floor`` is ``"2_28"`` (or another
    ``"2_N"``, or ``"host"``: no arguments at all); ``compiler`` is the compiler that will
    compile and link (``gcc`` for C, ``g++`` for C++, a cross compiler such as
    ``aarch64-linux-gnu-g++``); ``folder`` a folder of the build's own where the floor archive
    is written (once: a later call with the same compiler reuses it). Add ``compile`` to every
    compile command and ``link`` to the end of every command that links. For example::

        args = floor_args(build_floor(), "gcc", work / "floor")   # the build's floor
        run(["gcc", "-fPIC", *args.compile, "-c", "guards.c", "-o", "guards.o", *python_includes])
        run(["gcc", "-shared", "guards.o", "-o", "guards.so", *args.link])

    A library shipped in a package's ``_aot_build/`` folder is checked when the wheel is
    tagged (``package.command.wheel_platform``: the build fails naming each symbol that needs
    more than the floor); elsewhere, check it with
    ``platform_tag.check_floor([elf.read_dynamic(path)], parse_floor(floor))``. A C compiler
    without C++ support gets the archive without its C++ members (C never needs them). In a
    cross build (``AOT_BUILD_CROSS_TORCH``) pass the target's compiler (``CC``/``CXX``).

    How: the host's glibc and libstdc++ keep the old versions of what they changed, and the
    rest comes from the library itself. ``link`` holds a static archive of hidden definitions,
    of which the linker takes only those the output references: stubs that jump to the old
    version of each function glibc 2.34 moved out of libpthread (``pthread_rwlock_rdlock@
    GLIBC_2.2.5`` instead of ``@GLIBC_2.34``) and of ``std::condition_variable::wait``
    (``GLIBCXX_3.4.11`` instead of ``3.4.30``); a ``__libc_single_threaded`` of its own (glibc
    2.32; always "not single-threaded", so libstdc++ always uses atomics, as before 2.32); and
    the few newer libstdc++ members AOTInductor's code uses (``std::__throw_bad_array_new_length``,
    the default constructors and ``str() &&`` of the string streams), built from older ones.
    Below glibc 2.34 it also makes the output need ``libpthread.so.0``, where an older glibc
    has those functions (on a newer one it is an empty library). Nothing is compiled
    differently (``compile`` is empty today), so speed is unchanged; a symbol this does not
    cover stays as it is and the floor check names it.

    Raises FloorError for an invalid floor or an architecture without floor support
    (x86_64 and aarch64 have it).
    """
    minor = parse_floor(floor)
    if minor is None:
        return FloorArgs(floor)
    arch = compiler_arch(compiler)
    if arch not in _GLIBC_BASE:
        raise FloorError(
            f"manylinux floor {floor!r}: no floor support for {arch} (compiler {compiler}); "
            f'set manylinux = "{HOST_FLOOR}" in [tool.aot-build]'
        )
    sources = _floor_sources(arch)
    digest = hashlib.sha256(
        repr((_FLOOR_FORMAT, arch, sorted(sources.items()), str(shutil.which(compiler) or compiler))).encode()
    ).hexdigest()[:16]
    out = folder / f"{arch}-{digest}"
    archive = out / "libaot_build_floor.a"
    if not archive.is_file():
        out.mkdir(parents=True, exist_ok=True)
        objects = []
        for language in ("assembler", "c++"):  # one compiler run per language
            names = sorted(n for n, (lang, _) in sources.items() if lang == language)
            for name in names:
                (out / name).write_text(sources[name][1], encoding="utf-8")
            cmd = [compiler, "-x", language, "-c", "-O2", "-fPIC", *names]
            if language == "c++":
                cmd[4:4] = ["-std=c++17", "-fvisibility=hidden"]
            proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True, timeout=300)
            if proc.returncode != 0 and language == "c++" and not Path(compiler).name.endswith("++"):
                continue  # a C compiler without C++ support: what it links never needs these
            if proc.returncode != 0:
                raise FloorError(
                    f"building the manylinux floor archive failed ({' '.join(cmd)} in {out}):\n"
                    f"{proc.stderr.strip()}"
                )
            objects += [str(out / (name.rsplit(".", 1)[0] + ".o")) for name in names]
        tmp = out / f".{os.getpid()}.a"
        proc = subprocess.run(
            [binutil(compiler, "ar"), "rcsD", str(tmp), *objects], capture_output=True, text=True, timeout=300
        )
        if proc.returncode != 0:
            raise FloorError(f"ar could not make the manylinux floor archive: {proc.stderr.strip()}")
        tmp.replace(archive)
    link: tuple[str, ...] = (str(archive),)
    if minor < 34:
        link += ("-Wl,--push-state,--no-as-needed", "-l:libpthread.so.0", "-Wl,--pop-state")
    return FloorArgs(floor, (), link)
