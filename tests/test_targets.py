"""Device targets: names, compile options, and which artifacts a host can run."""

from __future__ import annotations

import pytest

from aot_build import targets
from aot_build.targets import (
    CPU_LEVELS,
    Target,
    compile_options,
    cuda_target_fits,
    host_cpu_targets,
    known_target_names,
    parse_target,
)


@pytest.mark.parametrize("name", ["cpu-avx512", "cpu-avx2", "cpu-baseline"])
def test_parse_x86_cpu_targets(name: str) -> None:
    assert parse_target(name, arch="x86_64") == Target(name, "cpu", None)


def test_parse_aarch64_only_baseline() -> None:
    assert parse_target("cpu-baseline", arch="aarch64") == Target("cpu-baseline", "cpu")
    with pytest.raises(
        ValueError, match=r"unknown target 'cpu-avx2' on aarch64; valid targets: cpu-baseline, "
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


def test_cpu_alias_is_host_level() -> None:
    t = parse_target("cpu")
    assert t.device == "cpu"
    assert t.name == host_cpu_targets()[0]
    assert t.name in CPU_LEVELS[targets.machine()]


@pytest.mark.parametrize("name", ["gpu", "cpu-avx", "cuda-90", "cuda-smX0", "CPU-AVX2", "cuda-sm9", ""])
def test_unknown_target_lists_valid_ones(name: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_target(name, arch="x86_64")
    msg = str(info.value)
    assert f"unknown target {name!r} on x86_64" in msg
    for valid in ("cpu-avx512", "cpu-avx2", "cpu-baseline", "cuda-sm80", "cuda-sm90", "'cpu'"):
        assert valid in msg


def test_known_target_names() -> None:
    assert known_target_names("x86_64")[:3] == ["cpu-avx512", "cpu-avx2", "cpu-baseline"]
    assert known_target_names("aarch64")[0] == "cpu-baseline"
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
    }
    assert compile_options(Target("cpu-avx2", "cpu"), arch="x86_64")["cpp.march"] == "x86-64-v3"
    assert compile_options(Target("cpu-baseline", "cpu"), arch="x86_64")["cpp.march"] == "x86-64"
    assert compile_options(Target("cpu-baseline", "cpu"), arch="aarch64")["cpp.march"] == "armv8-a"
    assert compile_options(Target("cuda-sm90", "cuda", (9, 0))) == {}
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
    assert host_cpu_targets() == expected


def test_host_cpu_targets_on_aarch64(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(targets, "machine", lambda: "aarch64")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "SVE256")
    assert host_cpu_targets() == ("cpu-baseline",)


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

    from aot_build.compile.isa import pinned_vec_isa

    before = cpu_vec_isa.valid_vec_isa_list
    with config.patch({"cpp.simdlen": simdlen}), pinned_vec_isa(parse_target(name)):
        picked = cpu_vec_isa.pick_vec_isa()
        assert str(picked) == isa
        got = picked.build_arch_flags() if picked else ""
        assert got == flags
        for extension in ("vnni", "bf16", "amx"):
            assert extension not in got
    assert cpu_vec_isa.valid_vec_isa_list is before
