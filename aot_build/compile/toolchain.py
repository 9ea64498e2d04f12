"""The C++ compiler as compile workers call it: build paths mapped out of the library.

AOTInductor compiles sources it writes into its cache folder under names hashed from their
compile command (which holds torch's include path), and torch's headers use ``__FILE__``: the
library embeds the cache folder's path, the source's hashed name and torch's install path (a
temporary folder in an isolated ``python -m build``), so two builds of the same program
differ. A small wrapper put first on the workers' ``PATH``, under the compiler's own name,
adds ``-ffile-prefix-map`` for all three; Inductor keeps calling the bare compiler name.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: Where the mapped paths point in a library (fixed, so builds agree).
INDUCTOR_PREFIX = "/aot-build/inductor"
TORCH_PREFIX = "/aot-build/torch"
SOURCE_PREFIX = "/aot-build/source"


def real_compiler() -> str:
    """Absolute path of the C++ compiler Inductor would use (``CXX`` or ``g++``)."""
    from torch._inductor.cpp_builder import get_cpp_compiler

    cxx = get_cpp_compiler()
    return shutil.which(cxx) or cxx


def write_wrapper(folder: Path) -> tuple[str, dict[str, str]]:
    """Write the wrapper into ``folder``; return the compiler name to give Inductor
    (``cpp.cxx``) and the environment a worker runs with (its ``PATH``; each worker also
    sets its own ``TORCHINDUCTOR_CACHE_DIR``, which the wrapper maps at run time)."""
    import torch

    real = real_compiler()
    name = Path(real).name
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    torch_dir = str(Path(torch.__file__).resolve().parent)
    script.write_text(
        "#!/bin/sh\n"
        "# aot_build: the C++ compiler with build paths mapped out of the output (reproducible)\n"
        "# Inductor names each source by a hash of its command line, which holds torch's include\n"
        "# path: map every source to its plain role (wrapper.cpp, kernel.cpp).\n"
        'for a in "$@"; do\n'
        '  case $a in *.cpp|*.cc|*.c) b=${a##*/}; set -- "$@" "-ffile-prefix-map=$a='
        f'{SOURCE_PREFIX}/${{b#*.}}";; esac\n'
        "done\n"
        f'exec {shlex.quote(real)} "-ffile-prefix-map=${{TORCHINDUCTOR_CACHE_DIR}}={INDUCTOR_PREFIX}" '
        f'{shlex.quote(f"-ffile-prefix-map={torch_dir}={TORCH_PREFIX}")} "$@"\n',
        encoding="utf-8",
    )
    script.chmod(0o755)
    return name, {"PATH": f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"}


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


def content_build_id(path: Path) -> None:
    """Replace the library's GNU build ID by a hash of its own content (build ID zeroed).

    The linker hashes its inputs, symbol names and paths of the objects AOTInductor links
    included, so the ID differs between builds even where the stripped library does not; the
    new one is as unique per content, and the same whenever the content is."""
    from ..package.elf import build_id_span

    span = build_id_span(path)
    if span is None:
        return
    offset, length = span
    data = bytearray(path.read_bytes())
    data[offset : offset + length] = bytes(length)
    digest = hashlib.sha1(data, usedforsecurity=False).digest()
    data[offset : offset + length] = (digest * (length // len(digest) + 1))[:length]
    path.write_bytes(bytes(data))
