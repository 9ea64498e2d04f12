"""The manylinux floor (aot_build.toolchain.floor_args): what a C or C++ library
linked with it needs of the system, that it still behaves as the host's, and the check that
names what a floor cannot cover. Small libraries built here with the host's gcc/g++: seconds."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from aot_build.native.elf import read_dynamic, symbols_by_version
from aot_build.native.platform_tag import PlatformTagError, check_floor, floor_tag, platform_tag
from aot_build.toolchain import (
    DEFAULT_FLOOR,
    FloorError,
    floor_args,
    parse_floor,
    write_wrapper,
)

pytestmark = pytest.mark.skipif(
    not (shutil.which("gcc") and shutil.which("g++")), reason="needs gcc and g++ on PATH"
)

# Uses what a gcc 12 / glibc 2.36 host binds to versions newer than manylinux_2_28's:
# pthread_rwlock_* (GLIBC_2.34), __libc_single_threaded (GLIBC_2.32, via shared_ptr),
# condition_variable::wait (GLIBCXX_3.4.30), std::__throw_bad_array_new_length and
# stringbuf::str() && (3.4.29), the stringstream default constructor (3.4.26).
CXX_SOURCE = r"""
#include <condition_variable>
#include <memory>
#include <mutex>
#include <new>
#include <pthread.h>
#include <sstream>
#include <string>
#include <thread>

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;

extern "C" int exercise(long n) {
    int score = 0;
    pthread_rwlock_wrlock(&lock); pthread_rwlock_unlock(&lock);
    pthread_rwlock_rdlock(&lock); pthread_rwlock_unlock(&lock);
    auto p = std::make_shared<int>(7); auto q = p;                    // refcount: __libc_single_threaded
    score += (*q == 7 && p.use_count() == 2);
    std::stringstream ss; ss << "ab" << 12;                            // default constructor
    std::string s = std::move(ss).str();                               // str() &&
    score += (s == "ab12") + (ss.str().empty());
    try { int* a = new int[n]; delete[] a; } catch (const std::bad_array_new_length&) { score += 1; }
    std::mutex m; std::condition_variable cv; bool ready = false;     // condition_variable::wait
    std::thread t([&] { std::lock_guard<std::mutex> g(m); ready = true; cv.notify_one(); });
    { std::unique_lock<std::mutex> u(m); while (!ready) cv.wait(u); }
    t.join();
    score += ready;
    return score;                                                      // 5: all behaved
}
"""
C_SOURCE = r"""
#include <pthread.h>
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
int twice(int x) { pthread_rwlock_rdlock(&lock); pthread_rwlock_unlock(&lock); return 2 * x; }
"""


def _build(tmp_path: Path, compiler: str, source: str, name: str, link: tuple[str, ...]) -> Path:
    suffix = ".cpp" if compiler == "g++" else ".c"
    src = tmp_path / f"{name}{suffix}"
    src.write_text(source, encoding="utf-8")
    out = tmp_path / f"{name}.so"
    cmd = [compiler, "-O2", "-fPIC", "-shared", str(src), "-o", str(out), *link]
    if compiler == "g++":
        cmd[1:1] = ["-std=c++20", "-pthread"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


@pytest.fixture(scope="module")
def floored(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("floor")
    out = {}
    for compiler, source, name in (("g++", CXX_SOURCE, "cxx"), ("gcc", C_SOURCE, "c")):
        args = floor_args(DEFAULT_FLOOR, compiler, tmp / "floor")
        assert args.compile == ()
        out[name] = _build(tmp, compiler, source, name, args.link)
        out[f"{name}-host"] = _build(tmp, compiler, source, f"{name}-host", ())
    return out


def test_host_floor_adds_nothing(tmp_path: Path) -> None:
    args = floor_args("host", "g++", tmp_path)
    assert (args.compile, args.link) == ((), ())
    assert not list(tmp_path.iterdir())


def test_floored_libraries_meet_manylinux_2_28(floored: dict[str, Path]) -> None:
    """C and C++ alike: the floored libraries need nothing beyond manylinux_2_28, and the wheel
    tag is the floor's; the host-linked ones need GLIBC_2.34 (and, for C++, 3.4.29/3.4.30)."""
    for name in ("cxx", "c"):
        lib = read_dynamic(floored[name])
        check_floor([lib], 28)
        assert floor_tag([lib], (), 28) == "manylinux_2_28_x86_64"
        assert int(platform_tag([lib]).split("_")[2]) <= 28
        assert "libpthread.so.0" in lib.needed  # where glibc < 2.34 has the old pthread_* versions
        host = symbols_by_version(floored[f"{name}-host"])
        if "GLIBC_2.34" not in host:
            pytest.skip("this host's glibc is older than 2.34: nothing to floor")
        assert "pthread_rwlock_rdlock" in host["GLIBC_2.34"]
        assert "pthread_rwlock_rdlock" in symbols_by_version(floored[name])["GLIBC_2.2.5"]
    cxx = symbols_by_version(floored["cxx"])
    assert not any(v.startswith(("GLIBCXX_3.4.3", "GLIBCXX_3.4.29", "GLIBC_2.32")) for v in cxx)


def test_floored_library_behaves_as_the_host_one(floored: dict[str, Path]) -> None:
    for name in ("cxx", "cxx-host"):
        lib = ctypes.CDLL(str(floored[name]))
        assert lib.exercise(ctypes.c_long(-1)) == 5, name
    assert ctypes.CDLL(str(floored["c"])).twice(21) == 42


def test_check_floor_names_the_symbols_that_need_more(floored: dict[str, Path]) -> None:
    host = read_dynamic(floored["cxx-host"])
    if "GLIBC_2.34" not in symbols_by_version(floored["cxx-host"]):
        pytest.skip("this host's glibc is older than 2.34")
    with pytest.raises(PlatformTagError) as info:
        floor_tag([host], (), 28)
    msg = str(info.value)
    assert "need more than manylinux_2_28 allows" in msg and str(floored["cxx-host"]) in msg
    assert "GLIBC_2.34 (pthread_rwlock_rdlock, pthread_rwlock_unlock, pthread_rwlock_wrlock)" in msg
    assert "_ZNSt18condition_variable4waitERSt11unique_lockISt5mutexE" in msg
    assert 'Set manylinux = "host"' in msg
    assert floor_tag([host], (), None) == platform_tag([host])  # "host": today's tag


@pytest.mark.parametrize("text", ["2.28", "2_29", "manylinux2014", "", "host2"])
def test_invalid_floor(text: str) -> None:
    with pytest.raises(FloorError, match=r"is not a manylinux floor; write \"2_28\" \(the default"):
        parse_floor(text, "AOT_BUILD_MANYLINUX")
    assert parse_floor("manylinux_2_28") == 28 and parse_floor("host") is None


def test_architecture_without_floor_support(tmp_path: Path) -> None:
    fake = tmp_path / "riscv64-linux-gnu-gcc"
    fake.write_text("#!/bin/sh\necho riscv64-linux-gnu\n")
    fake.chmod(0o755)
    with pytest.raises(FloorError, match=r"no floor support for riscv64 .*set manylinux = \"host\""):
        floor_args("2_28", str(fake), tmp_path / "floor")


def test_wrapper_adds_the_floor_to_links_only(tmp_path: Path) -> None:
    """The compile wrapper appends the floor's link arguments to a command that links a shared
    library, and to nothing else; with "host" it has none."""
    _, env = write_wrapper(tmp_path / "w", "2_28")
    src = tmp_path / "t.c"
    src.write_text(C_SOURCE)
    (script_path,) = [p for p in (tmp_path / "w").iterdir() if p.is_file()]
    wrapper = str(Path(env["PATH"].split(":")[0]) / script_path.name)
    script = script_path.read_text()
    assert "libaot_build_floor.a" in script and "-l:libpthread.so.0" in script
    subprocess.run([wrapper, "-x", "c", "-fPIC", "-c", str(src), "-o", str(tmp_path / "t.o")], check=True)
    subprocess.run([wrapper, "-shared", str(tmp_path / "t.o"), "-o", str(tmp_path / "t.so")], check=True)
    check_floor([read_dynamic(tmp_path / "t.so")], 28)
    write_wrapper(tmp_path / "h", "host")
    (host_script,) = [p for p in (tmp_path / "h").iterdir() if p.is_file()]
    assert "libaot_build_floor.a" not in host_script.read_text()


def test_wrapper_binds_a_librarys_own_functions_when_linking(tmp_path: Path) -> None:
    """A library the wrapper links calls the functions it defines itself directly: no PLT slot
    for them, which the dynamic loader would look up through every library torch has loaded;
    a function it takes from another library keeps its slot."""
    name, env = write_wrapper(tmp_path / "w", "host")
    wrapper = str(Path(env["PATH"].split(":")[0]) / name)
    src = tmp_path / "t.cpp"
    src.write_text(
        "#include <cstdlib>\n"
        'extern "C" int own_helper(int x) { return x * 3 + std::rand(); }\n'
        'extern "C" int entry(int x) { return own_helper(x) + own_helper(x + 1); }\n'
    )
    obj, lib = tmp_path / "t.o", tmp_path / "t.so"
    subprocess.run([wrapper, "-O0", "-fPIC", "-c", str(src), "-o", str(obj)], check=True)
    subprocess.run([wrapper, "-shared", str(obj), "-o", str(lib)], check=True)

    def slots(path: Path) -> list[str]:
        out = subprocess.run(["readelf", "-rW", str(path)], capture_output=True, text=True, check=True).stdout
        return [line.split()[4] for line in out.splitlines() if "JUMP_SLOT" in line]

    bound = slots(lib)
    assert not any("own_helper" in s for s in bound), bound
    assert any(s.startswith("rand") for s in bound), bound  # libc's: still looked up
    unbound = tmp_path / "plain.so"  # the same link without the wrapper has the slot
    subprocess.run([shutil.which("g++") or "g++", "-shared", str(obj), "-o", str(unbound)], check=True)
    assert any("own_helper" in s for s in slots(unbound))


def test_wrapper_keeps_a_name_inductor_knows_as_gcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inductor names its precompiled headers ``.gch`` only for a compiler whose name it takes
    for GCC (``cpp_builder._is_gcc``); under any other name it writes ``.pch``, which GCC never
    looks for, and every compile parses the headers again (wrapper.cpp 14 s instead of 10 s,
    kernel.cpp 5.8 s instead of 1.3 s; docs/development.md). The wrapper keeps g++'s name."""
    from torch._inductor import cpp_builder

    monkeypatch.delenv("CXX", raising=False)
    name, _ = write_wrapper(tmp_path / "w", "host")
    assert cpp_builder._is_gcc(name), name


CROSS_CXX = "aarch64-linux-gnu-g++"
needs_cross = pytest.mark.skipif(
    not shutil.which(CROSS_CXX),
    reason=f"needs {CROSS_CXX} (Debian: g++-aarch64-linux-gnu; .ci/run installs it)",
)


@needs_cross
def test_cross_compiled_aarch64_library_meets_the_floor(tmp_path: Path) -> None:
    """The floor archive is built for the compiler's architecture (aarch64's stubs bind the
    GLIBC_2.17 versions, its first) and its libraries meet manylinux_2_28 there too."""
    args = floor_args(DEFAULT_FLOOR, CROSS_CXX, tmp_path / "floor")
    assert "aarch64-" in args.link[0]
    src = tmp_path / "lib.cpp"
    src.write_text(CXX_SOURCE)
    out = tmp_path / "lib.so"
    cmd = [CROSS_CXX, "-std=c++20", "-pthread", "-O2", "-fPIC", "-shared", str(src), "-o", str(out)]
    cmd += args.link
    subprocess.run(cmd, check=True, capture_output=True)
    lib = read_dynamic(out)
    assert lib.machine == "aarch64"
    check_floor([lib], 28)
    assert floor_tag([lib], (), 28) == "manylinux_2_28_aarch64"
    assert "pthread_rwlock_rdlock" in symbols_by_version(out)["GLIBC_2.17"]


@needs_cross
def test_cross_build_maps_torch_to_the_target_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """AOT_BUILD_CROSS_TORCH: the build's architecture is that torch's, the wrapper points
    Inductor's paths into the host's torch at it, and a compiler for another architecture is
    refused naming the fix."""
    import torch

    from aot_build import targets
    from aot_build.toolchain import cross_torch

    cross = tmp_path / "torch"
    (cross / "lib").mkdir(parents=True)
    (tmp_path / "t.c").write_text("int f(void) { return 1; }\n")
    lib = cross / "lib" / "libtorch_cpu.so"
    cc = ["aarch64-linux-gnu-gcc", "-shared", "-fPIC"]
    subprocess.run([*cc, str(tmp_path / "t.c"), "-o", str(lib)], check=True)
    monkeypatch.setenv("AOT_BUILD_CROSS_TORCH", str(cross))
    assert targets.machine() == "aarch64"
    assert targets.expand_aliases(["cpu"]) == ["cpu-neon", "cpu-baseline"]
    with pytest.raises(FloorError, match=r"torch for aarch64, but the C\+\+ compiler .* for x86_64; set CXX"):
        cross_torch(shutil.which("g++") or "g++")
    from aot_build import toolchain

    # what CXX=aarch64-linux-gnu-g++ gives a build process (Inductor reads CXX at import)
    monkeypatch.setattr(toolchain, "real_compiler", lambda: shutil.which(CROSS_CXX))
    name, _ = write_wrapper(tmp_path / "w", "2_28")
    assert name == CROSS_CXX
    host_include = str(Path(torch.__file__).resolve().parent / "include")
    proc = subprocess.run(
        [str(tmp_path / "w" / name), f"-I{host_include}", "-###", "-c", str(tmp_path / "t.c")],
        capture_output=True,
        text=True,
        check=True,
    )
    mapped = f"{cross}/include"
    assert mapped in proc.stderr and host_include not in proc.stderr.replace(mapped, "")
