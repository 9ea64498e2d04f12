"""Device targets: names, compile options, and which artifacts a host can run."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from aot_build import targets
from aot_build.settings import Settings
from aot_build.targets import (
    CPU_LEVELS,
    CPU_THREAD_OPTIONS,
    Target,
    compile_options,
    cpu_flags,
    cuda_build_problem,
    cuda_target_fits,
    expand_aliases,
    host_cpu_targets,
    known_target_names,
    missing_features,
    parse_target,
)


@pytest.mark.parametrize("name", ["cpu-avx512", "cpu-avx2", "cpu-baseline"])
def test_parse_x86_cpu_targets(name: str) -> None:
    assert parse_target(name, arch="x86_64") == Target(name, "cpu", None)


def test_parse_aarch64_neon_and_baseline() -> None:
    assert parse_target("cpu-baseline", arch="aarch64") == Target("cpu-baseline", "cpu")
    assert parse_target("cpu-neon", arch="aarch64") == Target("cpu-neon", "cpu")
    with pytest.raises(
        ValueError, match=r"unknown target 'cpu-avx2' on aarch64; valid targets: cpu-neon, cpu-baseline, "
    ):
        parse_target("cpu-avx2", arch="aarch64")


@pytest.mark.parametrize(
    ("name", "capability"),
    [("cuda-sm80", (8, 0)), ("cuda-sm86", (8, 6)), ("cuda-sm90", (9, 0)), ("cuda-sm75", (7, 5))],
)
def test_parse_cuda_targets(name: str, capability: tuple[int, int]) -> None:
    t = parse_target(name, arch="x86_64")
    assert t == Target(name, "cuda", capability)


@pytest.mark.parametrize(("name", "capability"), [("cuda-sm100", (10, 0)), ("cuda-sm120", (12, 0))])
def test_parse_two_digit_major_cuda_targets(name: str, capability: tuple[int, int]) -> None:
    t = parse_target(name, arch="x86_64")
    assert t.capability == capability
    assert cuda_target_fits(t, capability)


def test_cpu_host_alias_is_host_level() -> None:
    t = parse_target("cpu-host")
    assert t.device == "cpu"
    assert t.name == host_cpu_targets()[0]
    assert t.name in CPU_LEVELS[targets.machine()]
    assert expand_aliases(["cpu-host"]) == [t.name]


@pytest.mark.parametrize(
    ("arch", "expected"),
    [
        ("x86_64", ["cpu-avx2", "cpu-baseline"]),
        ("aarch64", ["cpu-neon", "cpu-baseline"]),
        ("ppc64le", ["cpu-baseline"]),
        ("s390x", ["cpu-baseline"]),
    ],
)
def test_cpu_alias_is_a_set_every_machine_of_the_arch_runs(arch: str, expected: list[str]) -> None:
    assert expand_aliases(["cpu"], arch) == expected
    assert expand_aliases(["cpu-baseline", "cpu", "cuda-sm90"], arch) == [
        "cpu-baseline",
        *[t for t in expected if t != "cpu-baseline"],
        "cuda-sm90",
    ]
    for name in expected:  # every expanded name is a valid target there, with options
        t = parse_target(name, arch)
        assert "cpp.march" in compile_options(t, arch)


def test_default_targets_build_on_other_architectures(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ppc64le host (faked): the default settings give one baseline target, compiled with
    the compiler's default -march and no vector ISA, and the host loads it."""
    monkeypatch.setattr(targets.platform, "machine", lambda: "ppc64le")
    names = expand_aliases(Settings().targets)
    assert names == ["cpu-baseline"]
    expected = {"cpp.march": "", "cpp.simdlen": 1, **CPU_THREAD_OPTIONS}
    assert compile_options(parse_target(names[0])) == expected
    assert host_cpu_targets() == ("cpu-baseline",)


_V3 = {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
_V2 = {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}
_V4 = {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}


@pytest.mark.parametrize(
    ("flags", "capability", "expected"),
    [
        (_V2 | _V3 | _V4, "AVX512", ("cpu-avx512", "cpu-avx2", "cpu-baseline")),
        (_V2 | _V3 | _V4, "AVX2", ("cpu-avx2", "cpu-baseline")),  # ATEN_CPU_CAPABILITY caps
        (_V2 | _V3 | _V4 - {"avx512vl"}, "AVX512", ("cpu-avx2", "cpu-baseline")),
        (_V2 | _V3 - {"bmi2"}, "AVX2", ("cpu-baseline",)),  # AVX2+FMA but no BMI2: no v3 code
        (_V2 | _V3 - {"abm"}, "AVX2", ("cpu-baseline",)),  # no LZCNT
        (_V2 | _V3 - {"movbe"}, "AVX2", ("cpu-baseline",)),
        (_V3 - {"sse4_2"}, "AVX2", ("cpu-baseline",)),  # v3 includes v2
        (set(), "DEFAULT", ("cpu-baseline",)),
    ],
)
def test_host_targets_need_every_feature_of_their_level(
    monkeypatch: pytest.MonkeyPatch, flags: set[str], capability: str, expected: tuple[str, ...]
) -> None:
    monkeypatch.setattr(targets.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(targets, "_FLAGS", [frozenset(flags)])
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    assert host_cpu_targets() == expected


def test_missing_features_named() -> None:
    have = frozenset(_V2 | _V3 - {"bmi2", "abm"})
    assert missing_features("cpu-avx2", "x86_64", have) == {"bmi2", "abm"}
    assert missing_features("cpu-avx512", "x86_64", have) == {"bmi2", "abm"} | _V4
    assert missing_features("cpu-baseline", "x86_64", frozenset()) == set()


@pytest.mark.parametrize("block", [1, 7, 64, 16384])
def test_cpu_flags_reads_the_first_cpus_line_whatever_the_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """/proc/cpuinfo is read in blocks up to the first CPU's flags line: a line split across
    blocks, one at the very end without a newline, and a missing one all read right."""
    cpuinfo = tmp_path / "cpuinfo"
    cpu = "processor\t: {n}\nmodel name\t: X\nflagship\t: no\nflags\t\t: fpu sse2 avx2{extra}\n\n"
    cpuinfo.write_text(cpu.format(n=0, extra="") + cpu.format(n=1, extra=" avx512f"))
    monkeypatch.setattr(targets, "machine", lambda: "x86_64")
    assert cpu_flags(str(cpuinfo), block) == frozenset({"fpu", "sse2", "avx2"})
    cpuinfo.write_text("processor\t: 0\nFeatures\t: fp asimd")  # Arm, no newline at the end
    monkeypatch.setattr(targets, "machine", lambda: "aarch64")
    assert cpu_flags(str(cpuinfo), block) == frozenset({"fp", "asimd"})
    cpuinfo.write_text("processor\t: 0\nflags\t: fpu\n")  # this architecture writes "Features"
    assert cpu_flags(str(cpuinfo), block) is None
    assert cpu_flags(str(tmp_path / "missing"), block) is None


def test_cpu_flags_of_this_host() -> None:
    flags = cpu_flags()
    if targets.machine() == "x86_64":
        assert flags is not None and "sse2" in flags
    # the host's own targets are consistent with its flags
    for t in host_cpu_targets():
        assert not missing_features(t)


def test_cuda_build_needs_a_gpu_of_the_target_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    t = parse_target("cuda-sm80", "x86_64")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "no CUDA device" in (cuda_build_problem(t) or "")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    msg = cuda_build_problem(t) or ""
    assert "NVIDIA H100) has compute capability 9.0" in msg
    assert "build cuda-sm80 with a GPU of capability 8.0" in msg
    assert cuda_build_problem(parse_target("cuda-sm90", "x86_64")) is None


def test_cuda_options_pin_kernels_and_host_code() -> None:
    opts = compile_options(Target("cuda-sm90", "cuda", (9, 0)), arch="x86_64")
    assert opts["aot_inductor.embed_kernel_binary"] is True
    assert opts["aot_inductor.emit_multi_arch_kernel"] is False
    assert opts["cpp.march"] == "x86-64"  # host code runs on any CPU driving the GPU


@pytest.mark.parametrize("name", ["gpu", "cpu-avx", "cuda-90", "cuda-smX0", "CPU-AVX2", "cuda-sm9", ""])
def test_unknown_target_lists_valid_ones(name: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_target(name, arch="x86_64")
    msg = str(info.value)
    assert f"unknown target {name!r} on x86_64" in msg
    for valid in ("cpu-avx512", "cpu-avx2", "cpu-baseline", "cuda-sm80", "cuda-sm90", "'cpu'", "'cpu-host'"):
        assert valid in msg


def test_known_target_names() -> None:
    assert known_target_names("x86_64")[:3] == ["cpu-avx512", "cpu-avx2", "cpu-baseline"]
    assert known_target_names("aarch64")[:2] == ["cpu-neon", "cpu-baseline"]
    assert "cpu-avx2" not in known_target_names("aarch64")


@pytest.mark.parametrize(
    ("target", "device", "fits"),
    [
        ("cuda-sm80", (8, 0), True),
        ("cuda-sm80", (8, 6), True),
        ("cuda-sm80", (8, 9), True),
        ("cuda-sm86", (8, 0), False),
        ("cuda-sm80", (9, 0), False),
        ("cuda-sm90", (8, 9), False),
        ("cuda-sm90", (9, 0), True),
        ("cuda-sm75", (8, 0), False),
    ],
)
def test_cuda_target_fits(target: str, device: tuple[int, int], fits: bool) -> None:
    assert cuda_target_fits(parse_target(target, arch="x86_64"), device) is fits


def test_cpu_target_never_fits_cuda() -> None:
    assert not cuda_target_fits(Target("cpu-avx2", "cpu"), (8, 0))


def test_compile_options_pin_the_isa() -> None:
    assert compile_options(Target("cpu-avx512", "cpu"), arch="x86_64") == {
        "cpp.march": "x86-64-v4",
        "cpp.simdlen": 512,
        "cpp.dynamic_threads": True,  # run-time thread count, see test_concurrency
        "cpp.threads": 16,
    }
    assert compile_options(Target("cpu-avx2", "cpu"), arch="x86_64")["cpp.march"] == "x86-64-v3"
    assert compile_options(Target("cpu-baseline", "cpu"), arch="x86_64")["cpp.march"] == "x86-64"
    assert compile_options(Target("cpu-baseline", "cpu"), arch="aarch64")["cpp.march"] == "armv8-a"
    assert compile_options(Target("cpu-neon", "cpu"), arch="aarch64")["cpp.simdlen"] == 128
    # a copy: callers may add options without changing the table
    opts = compile_options(Target("cpu-avx2", "cpu"), arch="x86_64")
    opts["x"] = 1
    assert "x" not in compile_options(Target("cpu-avx2", "cpu"), arch="x86_64")


@pytest.mark.parametrize(
    ("capability", "expected"),
    [
        ("AVX512", ("cpu-avx512", "cpu-avx2", "cpu-baseline")),
        ("AVX2", ("cpu-avx2", "cpu-baseline")),
        ("DEFAULT", ("cpu-baseline",)),
    ],
)
def test_host_cpu_targets_follow_torch(
    monkeypatch: pytest.MonkeyPatch, capability: str, expected: tuple[str, ...]
) -> None:
    import torch

    monkeypatch.setattr(targets, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: capability)
    # a CPU with every feature: torch's view alone caps the list, whatever runs the test
    every = frozenset().union(*targets.CPU_FEATURES["x86_64"].values())
    monkeypatch.setattr(targets, "_FLAGS", [every])
    assert host_cpu_targets() == expected


def test_host_cpu_targets_on_aarch64(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(targets, "machine", lambda: "aarch64")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "SVE256")
    monkeypatch.setattr(targets, "_FLAGS", [frozenset({"fp", "asimd", "sve"})])
    assert host_cpu_targets() == ("cpu-neon", "cpu-baseline")
    monkeypatch.setattr(targets, "_FLAGS", [frozenset({"fp"})])  # no ASIMD: scalar only
    assert host_cpu_targets() == ("cpu-baseline",)
    monkeypatch.setattr(targets, "_FLAGS", [None])  # unknown (qemu-user shows the host's cpuinfo)
    assert host_cpu_targets() == ("cpu-neon", "cpu-baseline")


@pytest.mark.parametrize(("raw", "norm"), [("AMD64", "x86_64"), ("arm64", "aarch64"), ("x86_64", "x86_64")])
def test_machine_normalised(monkeypatch: pytest.MonkeyPatch, raw: str, norm: str) -> None:
    monkeypatch.setattr(targets.platform, "machine", lambda: raw)
    assert targets.machine() == norm


@pytest.mark.parametrize(
    ("name", "simdlen", "isa", "flags"),
    [
        ("cpu-avx512", 512, "avx512", "-mavx512f -mavx512dq -mavx512vl -mavx512bw -mfma"),
        ("cpu-avx2", 256, "avx2", "-mavx2 -mfma -mf16c"),
        ("cpu-baseline", 1, "INVALID_VEC_ISA", ""),
    ],
)
def test_pinned_vec_isa_ignores_the_build_hosts_extensions(
    name: str, simdlen: int, isa: str, flags: str
) -> None:
    """Whatever this host offers (VNNI, BF16, AMX), Inductor sees only the target's ISA while a
    target compiles, and gets its usual view back afterwards."""
    if targets.machine() != "x86_64":
        pytest.skip("x86-64 targets")
    from torch._inductor import config, cpu_vec_isa

    from aot_build.backends.aoti.isa import pinned_vec_isa

    before = cpu_vec_isa.valid_vec_isa_list
    with config.patch({"cpp.simdlen": simdlen}), pinned_vec_isa(parse_target(name)):
        picked = cpu_vec_isa.pick_vec_isa()
        assert str(picked) == isa
        got = picked.build_arch_flags() if picked else ""
        assert got == flags
        for extension in ("vnni", "bf16", "amx"):
            assert extension not in got
    assert cpu_vec_isa.valid_vec_isa_list is before
