"""The run-side shim, against a package compiled once in this module (no wheel involved).

``tests/packages/shim_pkg`` is compiled by ``python -m aot_build.compile`` (the build's child
process) into a temporary folder that then looks like an installed package. Every test
imports a fresh copy, so bindings, warnings and module globals never leak between tests.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import re
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from conftest import PKG, SHIM_CPU_TARGETS, Compiled
from helpers import run, run_traced

from aot_build.backends.aoti import library
from aot_build.constants import ARTIFACT_DIR, MANIFEST_NAME
from aot_build.errors import FallbackError, FallbackWarning, ManifestError
from aot_build.inspection import inspect_command
from aot_build.load import artifacts, shim
from aot_build.manifest import Manifest
from aot_build.targets import host_cpu_targets, machine

KEY = "shim_pkg.ops:affine"
CPU_TARGETS = SHIM_CPU_TARGETS


def _forget_package() -> None:
    for name in [n for n in sys.modules if n == PKG or n.startswith(PKG + ".")]:
        del sys.modules[name]


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Path], ModuleType]]:
    """Import ``shim_pkg.ops`` afresh from a given root (new entries, no cached manifest)."""

    def _load(root: Path) -> ModuleType:
        _forget_package()
        monkeypatch.syspath_prepend(str(root))
        monkeypatch.setattr(artifacts, "_MANIFESTS", {})
        module = importlib.import_module(f"{PKG}.ops")
        assert Path(module.__file__ or "").is_relative_to(root)
        return module

    yield _load
    _forget_package()


@pytest.fixture
def ops(compiled: Compiled, load: Callable[[Path], ModuleType]) -> ModuleType:
    return load(compiled.root)


@pytest.fixture
def patched_copy(compiled: Compiled, tmp_path: Path) -> Path:
    """A copy of the compiled package that a test may damage."""
    root = tmp_path / "copy"
    shutil.copytree(compiled.root, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


X = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))


def call(ops: ModuleType, *args: Any, **kwargs: Any) -> tuple[Any, bool, list[warnings.WarningMessage]]:
    """Call the entry: (result, whether Python ran, warnings raised, none filtered out)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, ran = run_traced(ops.affine, ops.affine.__wrapped__.__code__, *args, **kwargs)
    return out, ran, list(caught)


def eager(ops: ModuleType, *args: Any, **kwargs: Any) -> Any:
    return ops.affine.__wrapped__(*args, **kwargs)


def assert_same(actual: Any, expected: Any) -> None:
    assert isinstance(actual, tuple) and isinstance(actual[1], dict)
    torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-5)


def fallback_messages(caught: list[warnings.WarningMessage]) -> list[str]:
    assert all(issubclass(w.category, FallbackWarning) for w in caught), [str(w.message) for w in caught]
    return [str(w.message) for w in caught]


# ---------------------------------------------------------------- what the build wrote


def test_manifest_describes_the_entry(compiled: Compiled) -> None:
    m = compiled.manifest()
    assert m.package == PKG
    assert m.torch_version == torch.__version__
    assert m.machine == machine()
    assert sorted(m.entries) == [KEY, "shim_pkg.ops:energy"]
    entry = m.entries[KEY]
    path, line = entry.source.rsplit(":", 1)
    assert path == "shim_pkg/ops.py"
    source_lines = (compiled.root / path).read_text().splitlines()
    assert "affine" in source_lines[int(line)] or "affine" in source_lines[int(line) - 1]
    (variant,) = entry.variants
    x_leaf, k_leaf = variant.leaves
    assert x_leaf.tensor is not None and x_leaf.tensor.dims == (4, 8) and x_leaf.tensor.dtype == "float32"
    assert x_leaf.tensor.layout == "contiguous"
    assert k_leaf.tensor is None and k_leaf.value == 3
    assert variant.labels == ("x", "k")
    weights = {paths[0].label() for paths in variant.state.weight_paths()}
    assert weights == {"shim_pkg.ops.SCALE", "shim_pkg.ops.LINEAR.weight", "shim_pkg.ops.LINEAR.bias"}
    guards = {(variant.state.path(i).label(), c.kind) for i, c in variant.state.checks()}
    assert ("shim_pkg.ops.LINEAR", "type") in guards
    assert ("shim_pkg.ops.LINEAR._forward_hooks", "len") in guards
    assert ("type(shim_pkg.ops.LINEAR).forward", "id") in guards  # the class's method, too
    assert variant.embedded_constants == ()  # every tensor it reads is lifted
    assert [a.target for a in variant.artifacts] == list(CPU_TARGETS)
    assert all(a.device == "cpu" and a.backend == "aoti" for a in variant.artifacts)
    isa = {a.target: a.isa for a in variant.artifacts}
    assert isa["cpu-avx512"].startswith("AVX512") and isa["cpu-avx2"] == "AVX2"
    assert "scalar" in isa["cpu-baseline"]
    assert len({a.file for a in variant.artifacts}) == 3  # different code, different files


def _disassemble(path: Path) -> str:
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("needs binutils' objdump")
    return run([objdump, "-d", "--no-show-raw-insn", path], cwd=path.parent).stdout


_VEX_INSN = re.compile(r"^\s*[0-9a-f]+:\s+v[a-z0-9]+\s", re.MULTILINE)


@pytest.mark.skipif(machine() != "x86_64", reason="x86-64 vector ISAs")
def test_libraries_hold_only_their_targets_isa(compiled: Compiled) -> None:
    """cpu-avx2 has no AVX-512 register, cpu-baseline no VEX instruction at all, whatever
    the build host supports (the README's promise)."""
    (variant,) = compiled.manifest().entries[KEY].variants
    code = {a.target: _disassemble(compiled.artifact_dir / a.file) for a in variant.artifacts}
    assert "%ymm" in code["cpu-avx2"]  # it is vectorised
    assert "%zmm" not in code["cpu-avx2"]
    assert not re.search(r"%k[0-7]\b", code["cpu-avx2"])
    assert not _VEX_INSN.search(code["cpu-baseline"]), _VEX_INSN.findall(code["cpu-baseline"])[:5]
    assert "%ymm" not in code["cpu-baseline"] and "%zmm" not in code["cpu-baseline"]


def test_artifact_files_match_their_records(compiled: Compiled) -> None:
    m = compiled.manifest()
    on_disk = sorted(p.name for p in compiled.artifact_dir.iterdir())
    assert on_disk == sorted([*m.files, MANIFEST_NAME])
    raw = json.loads((compiled.artifact_dir / MANIFEST_NAME).read_text())
    assert sorted(raw["entries"].values()) == sorted(n for n in m.files if n.endswith(".json"))
    assert m.evaluator in m.files
    for name, record in m.files.items():
        data = (compiled.artifact_dir / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == record.sha256
        assert len(data) == record.size
        suffix = ".json" if name in raw["entries"].values() else ".so"
        assert name == f"{record.sha256[:24]}{suffix}"
        assert data[:4] == b"\x7fELF" if suffix == ".so" else json.loads(data)["variants"]
    assert f"{KEY} [{host_cpu_targets()[0]}] compiled in" in compiled.log


# ---------------------------------------------------------------- calls the artifact covers


def test_covered_call_runs_the_artifact(ops: ModuleType) -> None:
    out, ran, caught = call(ops, X, 3)
    assert caught == []
    assert not ran, "the Python function ran: the artifact was not used"
    assert_same(out, eager(ops, X, 3))
    assert set(out[1]) == {"total"}


def assert_compiled_with_new_weights(ops: ModuleType, before: Any) -> None:
    """The artifact answered silently, with eager's result, which the change moved."""
    out, ran, caught = call(ops, X, 3)
    assert caught == [] and not ran
    assert_same(out, eager(ops, X, 3))
    assert not torch.allclose(out[0], before[0])


def test_results_follow_reassigned_tensor_global(ops: ModuleType) -> None:
    before, _, _ = call(ops, X, 3)
    ops.SCALE = torch.tensor(-3.5)
    assert_compiled_with_new_weights(ops, before)


def test_results_follow_load_state_dict(ops: ModuleType) -> None:
    before, _, _ = call(ops, X, 3)
    g = torch.Generator().manual_seed(7)
    ops.LINEAR.load_state_dict(
        {k: torch.randn(v.shape, generator=g) for k, v in ops.LINEAR.state_dict().items()}
    )
    assert_compiled_with_new_weights(ops, before)


def test_results_follow_in_place_updates(ops: ModuleType) -> None:
    before, _, _ = call(ops, X, 3)
    ops.LINEAR.bias.mul_(-4).add_(1)
    ops.SCALE.add_(0.25)
    assert_compiled_with_new_weights(ops, before)


def test_results_follow_replaced_parameter(ops: ModuleType) -> None:
    ops.LINEAR.weight = torch.nn.Parameter(torch.eye(8), requires_grad=False)
    out, ran, caught = call(ops, X, 3)
    assert caught == [] and not ran
    assert_same(out, eager(ops, X, 3))


def test_requires_grad_weights_are_fine_without_grad_mode(ops: ModuleType) -> None:
    ops.LINEAR.requires_grad_(True)
    with torch.no_grad():
        out, ran, caught = call(ops, X, 3)
    assert caught == [] and not ran
    with torch.no_grad():
        assert_same(out, eager(ops, X, 3))


# ---------------------------------------------------------------- calls it does not cover


@pytest.mark.parametrize(
    ("make_args", "expected"),
    [
        (lambda: (torch.randn(2, 8), 3), "x dimension 0 is 2, compiled for 4"),
        (lambda: (X, 2), "k is int 2, compiled for int 3"),
        (lambda: (X, 3.0), "k is float 3.0, compiled for int 3"),
        (lambda: (torch.randn(8, 4).t(), 3), "x is not contiguous; pass a contiguous tensor"),
        (lambda: (X.clone().requires_grad_(True), 3), "require grad"),
    ],
    ids=["shape", "plain-value", "plain-type", "strides", "autograd"],
)
def test_uncovered_call_falls_back_with_one_warning(
    ops: ModuleType, make_args: Callable[[], tuple[Any, ...]], expected: str
) -> None:
    args = make_args()
    out, ran, caught = call(ops, *args)
    assert ran
    (msg,) = fallback_messages(caught)
    assert msg.startswith(f"aot_build: {KEY} runs as plain Python: ")
    assert expected in msg
    assert_same(out, eager(ops, *args))
    # the same call again: no second warning
    out2, ran2, caught2 = call(ops, *args)
    assert ran2 and caught2 == []
    assert_same(out2, eager(ops, *args))


def test_fallback_errors_are_the_python_functions(ops: ModuleType) -> None:
    """A call the artifact does not cover and Python cannot run either: the warning says why
    the artifact was skipped, then the function's own error reaches the caller."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError, match="same dtype"):
            ops.affine(X.double(), 3)
    (msg,) = fallback_messages(caught)
    assert "x is float64, compiled for float32" in msg


def test_keyword_arguments_bind_to_the_signature(ops: ModuleType) -> None:
    for kwargs in ({"k": 3}, {"x": X, "k": 3}):
        args = (X,) if "x" not in kwargs else ()
        out, ran, caught = call(ops, *args, **kwargs)
        assert not ran and caught == []
        assert_same(out, eager(ops, X, 3))
    out, ran, caught = call(ops, X, k=4)
    assert ran
    (msg,) = fallback_messages(caught)
    assert "k is int 4, compiled for int 3" in msg
    assert_same(out, eager(ops, X, 4))


def test_one_warning_per_failing_check(ops: ModuleType) -> None:
    _, _, first = call(ops, torch.randn(2, 8), 3)
    _, _, same_check = call(ops, torch.randn(5, 8), 3)  # the same check fails: no new warning
    _, _, other_check = call(ops, X, 5)
    assert len(fallback_messages(first)) == 1
    assert same_check == []
    assert len(fallback_messages(other_check)) == 1
    # and a covered call still runs compiled afterwards
    out, ran, caught = call(ops, X, 3)
    assert not ran and caught == []
    assert_same(out, eager(ops, X, 3))


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda m: setattr(m, "SCALE", torch.ones(8)),
            "weight shim_pkg.ops.SCALE is (8,) float32, compiled for () float32",
        ),
        (lambda m: setattr(m, "SCALE", torch.tensor(2.0, dtype=torch.float64)), "weight shim_pkg.ops.SCALE"),
        (
            lambda m: setattr(m, "LINEAR", torch.nn.Identity().eval()),
            "shim_pkg.ops.LINEAR is a torch.nn.modules.linear.Identity, compiled for "
            "torch.nn.modules.linear:Linear",
        ),
        (lambda m: m.LINEAR.requires_grad_(True), "require grad"),
        (
            lambda m: m.LINEAR.register_forward_pre_hook(lambda mod, args: None),
            "shim_pkg.ops.LINEAR._forward_pre_hooks has 1 entries, compiled with 0 "
            "(hooks are not compiled in)",
        ),
        (
            lambda m: setattr(m.LINEAR, "forward", lambda x: x),
            "shim_pkg.ops.LINEAR.forward is now set on the instance",
        ),
    ],
    ids=[
        "weight-shape",
        "weight-dtype",
        "module-replaced",
        "weights-require-grad",
        "hook",
        "forward-patched",
    ],
)
def test_changed_weights_fall_back(
    ops: ModuleType, change: Callable[[ModuleType], Any], expected: str
) -> None:
    change(ops)
    out, ran, caught = call(ops, X, 3)
    assert ran
    (msg,) = fallback_messages(caught)
    assert expected in msg
    assert_same(out, eager(ops, X, 3))


def test_loaded_target_is_the_hosts_best(ops: ModuleType) -> None:
    assert ops.affine.loaded_target() == host_cpu_targets()[0]


def test_host_without_any_fitting_artifact(
    patched_copy: Path, load: Callable[[Path], ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    def keep_avx512(raw: dict[str, Any]) -> None:
        for v in raw["entries"][KEY]["variants"]:
            v["artifacts"] = [a for a in v["artifacts"] if a["target"] == "cpu-avx512"]

    _edit_manifest(patched_copy, keep_avx512)
    monkeypatch.setattr(shim, "host_cpu_targets", lambda: ("cpu-avx2", "cpu-baseline"))
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert ran
    (msg,) = fallback_messages(caught)
    assert (
        "no CPU artifact this CPU can run (artifacts: cpu-avx512; this CPU runs: cpu-avx2, cpu-baseline)"
        in msg
    )
    assert_same(out, eager(ops, X, 3))
    assert ops.affine.loaded_target() is None


_PROBE = """
import json, sys, warnings
import torch
sys.path.insert(0, sys.argv[1])
warnings.simplefilter("error")
from shim_pkg import ops
x = torch.randn(4, 8)
out = ops.affine(x, 3)
torch.testing.assert_close(out, ops.affine.__wrapped__(x, 3), rtol=1e-4, atol=1e-5)
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(),
                  "loaded": ops.affine.loaded_target()}))
"""


@pytest.mark.skipif(machine() != "x86_64", reason="x86-64 CPU levels")
@pytest.mark.parametrize(
    ("capability", "expected"),
    [("avx2", "cpu-avx2"), ("default", "cpu-baseline")],
)
def test_aten_cpu_capability_selects_the_artifact(
    compiled: Compiled, tmp_path: Path, capability: str, expected: str
) -> None:
    """Forcing torch down to a lower CPU level (ATEN_CPU_CAPABILITY) forces aot_build down
    too, and that artifact computes the eager result with no warning."""
    if expected not in host_cpu_targets():
        pytest.skip(f"this CPU cannot run {expected}")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    proc = run([sys.executable, "-c", _PROBE, compiled.root], cwd=tmp_path, env=env)
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert facts["capability"] == capability.upper()
    assert facts["loaded"] == expected


# ---------------------------------------------------------------- environment switches


def test_deterministic_algorithms_fall_back_until_turned_off(ops: ModuleType) -> None:
    """Artifacts are compiled with deterministic algorithms off: while they are on, calls run
    as Python (eager's deterministic kernels, and any read of the setting), once warned."""
    torch.use_deterministic_algorithms(True)
    try:
        out, ran, caught = call(ops, X, 3)
        again, ran_again, caught_again = call(ops, X, 3)
    finally:
        torch.use_deterministic_algorithms(False)
    (message,) = fallback_messages(caught)
    assert ran and "deterministic algorithms are on (torch.use_deterministic_algorithms)" in message
    assert ran_again and caught_again == []  # one warning per check
    assert_same(out, eager(ops, X, 3))
    assert_same(again, out)
    out, ran, caught = call(ops, X, 3)
    assert not ran and caught == []


def test_strict_mode_raises_instead(ops: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AOT_BUILD_STRICT", "1")
    out, ran, caught = call(ops, X, 3)  # covered: fine
    assert not ran and caught == []
    assert_same(out, eager(ops, X, 3))
    with pytest.raises(
        FallbackError, match=r"shim_pkg.ops:affine runs as plain Python: .*AOT_BUILD_STRICT=1"
    ):
        ops.affine(torch.randn(2, 8), 3)
    with pytest.raises(FallbackError):  # every time, not once
        ops.affine(torch.randn(2, 8), 3)


@pytest.mark.parametrize("value", ["0", "false", "no", ""])
def test_strict_off_values(ops: ModuleType, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("AOT_BUILD_STRICT", value)
    x = torch.randn(2, 8)
    out, ran, caught = call(ops, x, 3)
    assert ran and len(fallback_messages(caught)) == 1
    assert_same(out, eager(ops, x, 3))


@pytest.mark.parametrize("value", ["1", "true", "yes"])
def test_disable_runs_plain_python(ops: ModuleType, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("AOT_BUILD_DISABLE", value)
    out, ran, caught = call(ops, X, 3)
    assert ran and caught == []
    assert_same(out, eager(ops, X, 3))
    _, ran, caught = call(ops, torch.randn(2, 8), 3)  # uncovered: still silent
    assert ran and caught == []
    assert ops.affine.loaded_target() is None


# ---------------------------------------------------------------- damaged installations


def _loaded_artifact(root: Path) -> Path:
    """The library this host loads for the entry (its best CPU target)."""
    (variant,) = Manifest.read(root / PKG / ARTIFACT_DIR / MANIFEST_NAME).entries[KEY].variants
    best = next(t for t in host_cpu_targets() if t in {a.target for a in variant.artifacts})
    (art,) = [a for a in variant.artifacts if a.target == best]
    return root / PKG / ARTIFACT_DIR / art.file


def _edit_manifest(root: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    """Edit the manifest as JSON, its entries' records inlined (the reader takes both forms)."""
    path = root / PKG / ARTIFACT_DIR / MANIFEST_NAME
    raw = json.loads(path.read_text())
    for key, record in raw["entries"].items():
        raw["entries"][key] = json.loads((path.parent / record).read_text())
    edit(raw)
    path.write_text(json.dumps(raw))


def test_damaged_artifact_falls_back(patched_copy: Path, load: Callable[[Path], ModuleType]) -> None:
    so = _loaded_artifact(patched_copy)
    data = bytearray(so.read_bytes())
    data[len(data) // 2] ^= 0xFF
    so.write_bytes(bytes(data))
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert ran
    (msg,) = fallback_messages(caught)
    assert f"artifact {so.name} is damaged (sha256 differs from the manifest)" in msg
    assert "reinstall" in msg
    assert_same(out, eager(ops, X, 3))


def test_truncated_artifact_falls_back(patched_copy: Path, load: Callable[[Path], ModuleType]) -> None:
    so = _loaded_artifact(patched_copy)
    so.write_bytes(so.read_bytes()[:1000])
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert ran and "sha256" in fallback_messages(caught)[0]
    assert_same(out, eager(ops, X, 3))


def test_unreadable_artifact_falls_back(patched_copy: Path, load: Callable[[Path], ModuleType]) -> None:
    """A path that cannot be read as a file (a directory in its place: tests run as root, so
    permission bits would not stop the read)."""
    so = _loaded_artifact(patched_copy)
    so.unlink()
    so.mkdir()
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert ran
    (msg,) = fallback_messages(caught)
    assert f"artifact {so.name} is not a plain file" in msg
    assert_same(out, eager(ops, X, 3))


def test_artifact_symlink_leading_out_is_refused(
    patched_copy: Path, tmp_path: Path, load: Callable[[Path], ModuleType]
) -> None:
    """A link to an identical library outside the package (the hash would match) is still
    refused: artifacts are read only from the package's own folder."""
    so = _loaded_artifact(patched_copy)
    outside = tmp_path / "elsewhere" / so.name
    outside.parent.mkdir()
    shutil.move(so, outside)
    so.symlink_to(outside)
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert ran
    (msg,) = fallback_messages(caught)
    assert f"artifact {so.name} is not a plain file in" in msg and str(outside) in msg
    assert_same(out, eager(ops, X, 3))


def test_artifact_symlink_inside_the_folder_is_followed(
    patched_copy: Path, load: Callable[[Path], ModuleType]
) -> None:
    so = _loaded_artifact(patched_copy)
    so.rename(so.with_name("real.so"))
    so.symlink_to("real.so")
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert not ran and caught == []
    assert_same(out, eager(ops, X, 3))


@pytest.mark.parametrize("name", ["../../evil.so", "/tmp/evil.so", "sub/x.so", ".hidden.so", "", "a" * 200])
def test_manifest_naming_a_file_outside_the_folder_is_refused(
    patched_copy: Path, load: Callable[[Path], ModuleType], name: str
) -> None:
    """A manifest whose file names are paths (``../../x.so``) never makes the shim open
    anything: the manifest is refused as a whole, and the entry runs as Python."""
    so = _loaded_artifact(patched_copy)

    def point_outside(raw: dict[str, Any]) -> None:
        raw["files"][name] = raw["files"].pop(so.name)
        for v in raw["entries"][KEY]["variants"]:
            for a in v["artifacts"]:
                if a["file"] == so.name:
                    a["file"] = name

    _edit_manifest(patched_copy, point_outside)
    opened: list[str] = []
    original = library.open_library
    library.open_library = lambda path, device: opened.append(str(path)) or original(path, device)  # type: ignore[func-returns-value]
    try:
        ops = load(patched_copy)
        out, ran, caught = call(ops, X, 3)
    finally:
        library.open_library = original
    assert ran and opened == []
    (msg,) = fallback_messages(caught)
    assert f"file name {name!r} is not a plain file name in the artifact folder" in msg
    assert_same(out, eager(ops, X, 3))


def test_missing_artifact_falls_back(patched_copy: Path, load: Callable[[Path], ModuleType]) -> None:
    so = _loaded_artifact(patched_copy)
    so.unlink()
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert ran
    (msg,) = fallback_messages(caught)
    assert f"artifact {so.name} is missing or unreadable" in msg
    assert_same(out, eager(ops, X, 3))


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda r: r.update(torch_version="2.12.0"), "built with torch 2.12.0, this is torch 2.13.0"),
        (lambda r: r.update(torch_version="2.14.1"), "built with torch 2.14.1, this is torch 2.13.0"),
        (lambda r: r.update(machine="riscv64"), "artifacts are for riscv64"),
        (lambda r: r.update(format_version=99), "format_version 99"),
        (lambda r: r.update(format="other"), "not an aot_build manifest"),
        (lambda r: r["entries"].pop(KEY), "not in the package's manifest"),
        (lambda r: r.pop("files"), "damaged manifest"),
        (lambda r: r["files"].clear(), "not listed in the manifest"),
    ],
    ids=[
        "torch-upgraded",
        "torch-downgraded",
        "machine",
        "newer-format",
        "other-format",
        "entry-missing",
        "files-missing",
        "file-unlisted",
    ],
)
def test_unusable_manifest_falls_back(
    patched_copy: Path,
    load: Callable[[Path], ModuleType],
    edit: Callable[[dict[str, Any]], Any],
    expected: str,
) -> None:
    _edit_manifest(patched_copy, edit)
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert ran
    (msg,) = fallback_messages(caught)
    assert msg.startswith(f"aot_build: {KEY} runs as plain Python: ")
    assert expected in msg
    assert_same(out, eager(ops, X, 3))
    _, _, again = call(ops, X, 3)
    assert again == []


@pytest.mark.parametrize(
    "damage",
    [
        lambda path: path.write_text("{ not json"),
        lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2]),
        lambda path: path.write_bytes(b"\xff\xfe" + path.read_bytes()),
    ],
    ids=["invalid-json", "truncated", "not-utf8"],
)
def test_unreadable_manifest_falls_back(
    patched_copy: Path, load: Callable[[Path], ModuleType], damage: Callable[[Path], Any]
) -> None:
    damage(patched_copy / PKG / ARTIFACT_DIR / MANIFEST_NAME)
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert ran
    (msg,) = fallback_messages(caught)
    assert "cannot read manifest" in msg
    assert_same(out, eager(ops, X, 3))


def test_no_manifest_is_plain_python(patched_copy: Path, load: Callable[[Path], ModuleType]) -> None:
    shutil.rmtree(patched_copy / PKG / ARTIFACT_DIR)
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert ran and caught == []
    assert_same(out, eager(ops, X, 3))
    assert ops.affine.loaded_target() is None


# ---------------------------------------------------------------- python -m aot_build inspect


def test_inspect_a_package_folder(compiled: Compiled) -> None:
    info = json.loads(inspect_command(str(compiled.root), as_json=True))
    assert info["host_cpu_targets"] == list(host_cpu_targets())
    (pkg,) = info["packages"]
    # two entries x three targets, the guard evaluator, the two entries' records
    assert pkg["package"] == PKG and pkg["files"] == 6 + 1 + 2 and pkg["guard_evaluator"].endswith(".so")
    entry, _energy = pkg["entries"]
    assert entry["entry"] == KEY
    assert entry["inputs"] == [{"name": "x", "dims": [4, 8], "dtype": "float32"}, {"name": "k", "value": 3}]
    assert entry["signature"] == "x: float32[4, 8], k: 3"
    assert entry["weights"] == 3
    assert [a["target"] for a in entry["artifacts"]] == list(CPU_TARGETS)
    assert entry["this_host_loads"] == host_cpu_targets()[0]
    text = inspect_command(str(compiled.root), as_json=False)
    assert KEY in text and "<- this host loads" in text


def test_inspect_without_manifest(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="no aot_build manifest found"):
        inspect_command(str(tmp_path), as_json=False)


def test_manifest_with_wrong_container_falls_back(
    patched_copy: Path, load: Callable[[Path], ModuleType]
) -> None:
    _edit_manifest(patched_copy, lambda r: r.update(entries=[]))
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert ran and len(fallback_messages(caught)) == 1
    assert_same(out, eager(ops, X, 3))


def test_fallback_warning_points_at_the_caller(ops: ModuleType) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ops.affine(torch.randn(2, 8), 3)  # the caller's line
    (w,) = caught
    assert issubclass(w.category, FallbackWarning)
    assert w.filename == __file__, f"warning attributed to {w.filename}:{w.lineno}"


def test_training_flag_the_trace_never_read_is_not_guarded(ops: ModuleType) -> None:
    """Linear ignores ``training``: the artifact computes the same either way, so .train()
    keeps it compiled (a module that reads the flag, like Dropout, is guarded: e2e tests)."""
    ops.LINEAR.train()
    with torch.no_grad():
        out, ran, caught = call(ops, X, 3)
        assert not ran and caught == []
        assert_same(out, eager(ops, X, 3))


# ---------------------------------------------------------------- host and device selection


def test_cpu_lacking_a_feature_of_its_level_gets_a_lower_artifact(
    compiled: Compiled, load: Callable[[Path], ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    """AVX2 and FMA alone do not make an x86-64-v3 CPU: without BMI2 the AVX2 artifact (whose
    code may use it) is passed over for the baseline one, which computes the eager result."""
    from aot_build import targets

    flags = targets.cpu_flags()
    if machine() != "x86_64" or flags is None or "bmi2" not in flags:
        pytest.skip("needs an x86-64 host with BMI2 to take it away")
    monkeypatch.setattr(targets, "_FLAGS", [flags - {"bmi2"}])
    ops = load(compiled.root)
    out, ran, caught = call(ops, X, 3)
    assert not ran and caught == []
    assert ops.affine.loaded_target() == "cpu-baseline"
    assert_same(out, eager(ops, X, 3))


def test_artifacts_traced_under_another_python_fall_back(
    patched_copy: Path, load: Callable[[Path], ModuleType]
) -> None:
    _edit_manifest(patched_copy, lambda raw: raw.update(python_version="3.99"))
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert ran
    (msg,) = fallback_messages(caught)
    assert "artifacts were traced under Python 3.99, this is 3." in msg
    assert_same(out, eager(ops, X, 3))


def _cuda_variant(compiled: Compiled, *names: str) -> Any:
    manifest = compiled.manifest()
    (variant,) = manifest.entries[KEY].variants
    arts = tuple(dataclasses.replace(variant.artifacts[0], target=n, device="cuda") for n in names)
    return shim._VariantRunner(
        dataclasses.replace(variant, artifacts=arts), compiled.artifact_dir, manifest, frozenset(), None
    )


@pytest.mark.parametrize(
    ("capability", "expected"),
    [((8, 6), "cuda-sm86"), ((8, 9), "cuda-sm86"), ((9, 0), "cuda-sm90"), ((10, 0), "cuda-sm100")],
)
def test_cuda_artifact_choice_by_device_capability(
    compiled: Compiled, monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], expected: str
) -> None:
    runner = _cuda_variant(compiled, "cuda-sm80", "cuda-sm86", "cuda-sm90", "cuda-sm100")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(shim, "_runner", lambda folder, art, manifest, device, fn: (art.target, str(device)))
    assert runner.runner(torch.device("cuda", 1)) == (expected, "cuda:1")


def test_cuda_device_without_a_fitting_artifact(compiled: Compiled, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = _cuda_variant(compiled, "cuda-sm80", "cuda-sm90")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    with pytest.raises(shim.Miss) as info:
        runner.runner(torch.device("cuda", 0))
    assert info.value.reason == "device"
    assert "no artifact for cuda:0 (capability (7, 5))" in str(info.value)


def test_cuda_runners_are_made_per_device_index(compiled: Compiled, monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA runner is bound to one device: ``cuda:1`` inputs get their own, never the
    ``cuda:0`` one; each is opened once and reused."""
    opened: list[tuple[str, str]] = []

    class FakeRunner:
        def run(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
            return tensors

    def fake_open(path: Path, device: str) -> FakeRunner:
        opened.append((path.name, device))
        return FakeRunner()

    monkeypatch.setattr(shim, "_RUNNERS", {})
    monkeypatch.setattr(library, "open_library", fake_open)
    manifest = compiled.manifest()
    art = manifest.entries[KEY].variants[0].artifacts[0]
    cuda0, cuda1 = torch.device("cuda", 0), torch.device("cuda", 1)
    r0 = shim._runner(compiled.artifact_dir, art, manifest, cuda0, None)
    r1 = shim._runner(compiled.artifact_dir, art, manifest, cuda1, None)
    assert r0 is not r1
    assert shim._runner(compiled.artifact_dir, art, manifest, cuda1, None) is r1
    assert opened == [(art.file, "cuda:0"), (art.file, "cuda:1")]


def test_open_library_passes_the_device_index(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    made: list[tuple[Any, ...]] = []

    class FakeRunner:
        def __init__(self, *args: Any) -> None:
            made.append(args)

    monkeypatch.setattr(torch._C._aoti, "AOTIModelContainerRunnerCuda", FakeRunner, raising=False)
    library.open_library(tmp_path / "x.so", "cuda:1")
    assert made == [(str(tmp_path / "x.so"), 1, "cuda:1")]


def test_library_errors_fall_back(ops: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """An error raised by the library (a failed kernel launch, say) runs the Python function
    with a warning; strict mode raises instead."""
    call(ops, X, 3)  # bound, runner cached

    class Failing:
        def run(self, tensors: Any) -> Any:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    bound = shim._RUNNERS.copy()
    monkeypatch.setattr(shim, "_RUNNERS", {k: Failing().run for k in bound})
    ops = importlib.reload(ops)
    out, ran, caught = call(ops, X, 3)
    assert ran
    (msg,) = fallback_messages(caught)
    assert "the library failed: RuntimeError: CUDA error: an illegal memory access" in msg
    assert_same(out, eager(ops, X, 3))
    monkeypatch.setenv("AOT_BUILD_STRICT", "1")
    ops = importlib.reload(ops)
    with pytest.raises(FallbackError, match="the library failed"):
        ops.affine(X, 3)


@pytest.mark.parametrize(
    ("backend", "version", "fragment"),
    [
        ("aoti", "99", "built by compile backend 'aoti' version 99, this environment has version 1"),
        ("no-such-one", "1", "no compile backend 'no-such-one' is installed (available: aoti, dynamo"),
    ],
)
def test_artifact_of_a_backend_not_installed_falls_back(
    patched_copy: Path,
    load: Callable[[Path], ModuleType],
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    version: str,
    fragment: str,
) -> None:
    """An artifact whose backend (or backend version) this environment lacks is never loaded:
    one warning naming the backend, the eager result; strict mode raises."""

    def relabel(raw: dict[str, Any]) -> None:
        for e in raw["entries"].values():
            for v in e["variants"]:
                for a in v["artifacts"]:
                    a["backend"], a["backend_version"] = backend, version

    _edit_manifest(patched_copy, relabel)
    monkeypatch.setattr(shim, "_NO_BACKEND", {})
    monkeypatch.setattr(shim, "_RUNNERS", {})
    ops = load(patched_copy)
    out, ran, caught = call(ops, X, 3)
    assert ran
    (msg,) = fallback_messages(caught)
    assert fragment in msg, msg
    assert_same(out, eager(ops, X, 3))
    out, ran, caught = call(ops, X, 3)
    assert ran and caught == []  # once per entry and reason
    monkeypatch.setenv("AOT_BUILD_STRICT", "1")
    ops = load(patched_copy)
    with pytest.raises(FallbackError, match=re.escape(fragment)):
        ops.affine(X, 3)
