"""Names and versions shared by the writer (build side) and the reader (run side).

Both sides import this module and nothing else defines these values, so a wheel and the
shim that reads it can never disagree on a file name or a format number.
"""

from __future__ import annotations

#: Folder, inside each top-level package of a wheel, that holds the manifest and artifacts.
ARTIFACT_DIR = "_aot_build"
#: The manifest's file name inside :data:`ARTIFACT_DIR`.
MANIFEST_NAME = "manifest.json"
#: Stamp written into every manifest; a reader refuses any other.
MANIFEST_FORMAT = "aot-build-manifest"
#: Bumped on every change of the manifest's layout. Readers accept every version from 1 up
#: to theirs (older ones are upgraded in memory) and refuse newer ones.
MANIFEST_VERSION = 4
#: Manifest version → the first aot-build release whose reader understands it. A wheel requires
#: ``aot-build>=READERS[MANIFEST_VERSION]``, so pip never pairs it with a reader too old for it.
READERS: dict[int, str] = {1: "0.1.0", 2: "0.2.0", 3: "0.3.0", 4: "0.4.0"}

#: The ``[tool.<name>]`` table that opts a project in.
TOOL_TABLE = "aot-build"

#: Environment variables read at run time.
ENV_STRICT = "AOT_BUILD_STRICT"
ENV_DISABLE = "AOT_BUILD_DISABLE"
#: Environment variable read at build time; overrides ``targets`` from pyproject.toml.
ENV_TARGETS = "AOT_BUILD_TARGETS"
#: Environment variable read at build time; overrides ``cache-dir`` from pyproject.toml.
ENV_CACHE_DIR = "AOT_BUILD_CACHE_DIR"
#: Overrides ``[tool.aot-build] jobs``.
ENV_JOBS = "AOT_BUILD_JOBS"
#: Overrides ``[tool.aot-build] manylinux`` (the glibc/libstdc++ floor of shipped libraries).
ENV_MANYLINUX = "AOT_BUILD_MANYLINUX"
#: Cross builds: the ``torch`` folder of an installed torch wheel of the target architecture
#: (headers and libraries to compile and link against), with ``CXX`` its cross compiler.
ENV_CROSS_TORCH = "AOT_BUILD_CROSS_TORCH"
#: A folder where compiles keep Inductor's precompiled headers beyond the build, shared by
#: later builds in the same environment (:func:`aot_build.toolchain.header_folder`).
ENV_HEADERS_DIR = "AOT_BUILD_HEADERS_DIR"
#: A folder of artifacts built elsewhere (``python -m aot_build assemble``): the wheel ships
#: them instead of compiling.
ENV_PREBUILT = "AOT_BUILD_PREBUILT"

#: Name of the compile backend that exports with torch.export and compiles with AOTInductor.
BACKEND_AOTI = "aoti"
