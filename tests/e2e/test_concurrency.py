"""Run time under concurrency and in unusual processes: many processes importing at once,
threads racing to make the first call, fork and spawn workers (multiprocessing, DataLoader),
a process out of address space when the library loads, and nothing written anywhere.

Every process works on ``tests/packages/shim_pkg`` compiled once (conftest ``compiled``), in
strict mode wherever the call must run compiled, and compares with the Python function."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Compiled

_COMMON = """
import json, os, sys, warnings
import torch
sys.path.insert(0, ROOT)
from shim_pkg import ops

def check(x):
    got = ops.affine(x, 3)
    torch.testing.assert_close(got, ops.affine.__wrapped__(x, 3), rtol=1e-4, atol=1e-5)
    return ops.affine.loaded_target()
"""


def _script(tmp_path: Path, compiled: Compiled, body: str, name: str = "probe.py") -> Path:
    path = tmp_path / name
    text = f"ROOT = {str(compiled.root)!r}\n" + _COMMON + textwrap.dedent(body)
    path.write_text(text, encoding="utf-8")
    return path


def _result(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT: ")]
    assert len(lines) == 1, proc.stdout + proc.stderr
    return json.loads(lines[0].removeprefix("RESULT: "))


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AOT_BUILD", "TORCHINDUCTOR"))}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor-cache"), **extra)
    return env


def test_sixteen_processes_import_and_call_at_once(compiled: Compiled, tmp_path: Path) -> None:
    """16 fresh interpreters started together, each importing the package and calling the
    entry several times: every call compiled (strict mode) and equal to eager."""
    script = _script(
        tmp_path,
        compiled,
        """
        x = torch.randn(4, 8)
        targets = {check(x + i) for i in range(20)}
        print("RESULT: " + json.dumps(sorted(targets)))
        """,
    )
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=_env(tmp_path, AOT_BUILD_STRICT="1", OMP_NUM_THREADS="1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(16)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        results.append(_result(subprocess.CompletedProcess(p.args, p.returncode, out, err)))
    elapsed = time.perf_counter() - t0
    assert len(results) == 16
    assert all(r == results[0] and r and r[0] is not None for r in results), results
    print(f"16 processes x 20 calls: {elapsed:.1f} s, all compiled, none lost")


def test_eight_threads_race_to_the_first_call(compiled: Compiled, tmp_path: Path) -> None:
    """8 threads make the first call of one entry at the same moment: each gets the compiled
    result (strict mode), and the library is opened once."""
    script = _script(
        tmp_path,
        compiled,
        """
        import threading
        from aot_build.backends.aoti import library
        opened = []
        original = library.open_library
        def counting(path, device):
            opened.append(str(path))
            return original(path, device)
        library.open_library = counting
        barrier = threading.Barrier(8)
        results, errors = [], []
        def worker(i):
            x = torch.randn(4, 8) + i
            barrier.wait()
            try:
                results.append(check(x))
            except BaseException as exc:
                errors.append(repr(exc))
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads: t.start()
        for t in threads: t.join()
        print("RESULT: " + json.dumps({"results": results, "errors": errors, "opened": opened}))
        """,
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(tmp_path, AOT_BUILD_STRICT="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    facts = _result(proc)
    assert facts["errors"] == []
    assert len(facts["results"]) == 8 and len(set(facts["results"])) == 1 and facts["results"][0]
    assert len(facts["opened"]) == 1, facts["opened"]


def test_fork_spawn_and_dataloader_workers(compiled: Compiled, tmp_path: Path) -> None:
    """After a first call in the parent: forked children, spawned children and DataLoader
    workers all call the entry compiled (strict mode) with the eager result."""
    script = _script(
        tmp_path,
        compiled,
        """
        import multiprocessing as mp

        def job(i):
            return check(torch.randn(4, 8) + i)

        class Data(torch.utils.data.Dataset):
            def __len__(self):
                return 4
            def __getitem__(self, i):
                return job(i)

        if __name__ == "__main__":
            first = check(torch.randn(4, 8))
            out = {"parent": first}
            for method in ("fork", "spawn"):
                with mp.get_context(method).Pool(2) as pool:
                    out[method] = sorted(set(pool.map(job, range(4))))
            loader = torch.utils.data.DataLoader(Data(), num_workers=2, batch_size=None,
                                                 multiprocessing_context="fork")
            out["dataloader"] = sorted(set(loader))
            print("RESULT: " + json.dumps(out))
        """,
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(tmp_path, AOT_BUILD_STRICT="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    facts = _result(proc)
    target = facts["parent"]
    assert target is not None
    assert facts == {"parent": target, "fork": [target], "spawn": [target], "dataloader": [target]}


def test_library_load_failing_for_lack_of_memory_falls_back(compiled: Compiled, tmp_path: Path) -> None:
    """The address space is capped at what the process uses just before the first call (the
    run-side code already imported), so the first call runs out of memory while binding
    (reading the entry's record, generating its check) or opening the library: it runs the
    Python function with one warning and the eager result instead of crashing; once memory is
    back, the next call binds, loads the library and runs compiled."""
    script = _script(
        tmp_path,
        compiled,
        """
        import resource
        import aot_build.load.shim  # only the library is left to load at the first call
        x = torch.randn(4, 8)
        expected = ops.affine.__wrapped__(x, 3)
        def vm_bytes():
            with open("/proc/self/status") as fh:
                for line in fh:
                    if line.startswith("VmSize:"):
                        return int(line.split()[1]) * 1024
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (vm_bytes(), hard))  # soft limit: can be lifted
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                got = ops.affine(x, 3)
        finally:
            resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
        ran_python = []
        code = ops.affine.__wrapped__.__code__
        sys.setprofile(lambda frame, event, arg: ran_python.append(1) if frame.f_code is code else None)
        again = ops.affine(x, 3)
        sys.setprofile(None)
        torch.testing.assert_close(again, expected, rtol=1e-4, atol=1e-5)
        print("RESULT: " + json.dumps({"warnings": [str(w.message) for w in caught],
                                       "ran_python_again": bool(ran_python)}))
        """,
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(tmp_path, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    facts = _result(proc)
    assert len(facts["warnings"]) == 1, facts
    # where the memory runs out (the record, the check, the library) depends on the allocator
    message = facts["warnings"][0]
    assert "runs as plain Python: " in message, facts
    assert "cannot load" in message or "out of memory while reading its manifest record" in message, facts
    assert facts["ran_python_again"] is False, facts


def test_nothing_is_written_at_run_time(compiled: Compiled, tmp_path: Path) -> None:
    """An audit hook installed once torch is imported records every file opened for writing,
    every file-system change and every unpickling while the package is imported and its
    entry bound and called: there is none."""
    script = _script(
        tmp_path,
        compiled,
        """
        writes = []
        MUTATING = {"os.mkdir", "os.remove", "os.rename", "os.rmdir", "os.symlink", "os.link",
                    "os.chmod", "os.chown", "os.truncate", "os.utime", "shutil.copyfile",
                    "shutil.rmtree", "tempfile.mkstemp", "tempfile.mkdtemp"}
        def hook(event, args):
            if event == "open":
                mode, flags = (list(args) + [None, None])[1:3]
                writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT
                by_flags = isinstance(flags, int) and flags & writing
                if by_flags or (mode and any(c in str(mode) for c in "wax+")):
                    writes.append((event, str(args[0]), str(mode), flags))
            elif event in MUTATING:
                writes.append((event, str(args[0]) if args else ""))
            elif event == "pickle.find_class":  # nothing is unpickled either
                writes.append((event, str(args[:2])))
        sys.addaudithook(hook)
        import importlib
        importlib.reload(ops)
        targets = [check(torch.randn(4, 8)) for _ in range(3)]
        print("RESULT: " + json.dumps({"writes": writes, "targets": targets}))
        """,
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(tmp_path, AOT_BUILD_STRICT="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    facts = _result(proc)
    assert facts["writes"] == []
    assert facts["targets"][0] is not None


@pytest.mark.parametrize("value", ["1", "true"])
def test_disable_in_a_fresh_process(compiled: Compiled, tmp_path: Path, value: str) -> None:
    script = _script(
        tmp_path,
        compiled,
        """
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            target = check(torch.randn(4, 8))
        print("RESULT: " + json.dumps({"target": target, "warnings": len(caught)}))
        """,
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(tmp_path, AOT_BUILD_DISABLE=value),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert _result(proc) == {"target": None, "warnings": 0}


@pytest.mark.parametrize("threads", [1, 8, 32])
def test_more_threads_than_the_build_machine_had(compiled: Compiled, tmp_path: Path, threads: int) -> None:
    """Inductor sizes a parallel reduction's per-thread buffers by the build machine's thread
    count unless told otherwise; run with more threads than the build had cores, such an
    artifact wrote past them (a segfault here, at 4 threads from a 2-core build). Every
    artifact must give eager's result at any thread count (strict mode: compiled or error)."""
    script = _script(
        tmp_path,
        compiled,
        f"""
        torch.set_num_threads({threads})
        x = torch.randn(2048, 512)
        got = ops.energy(x)
        torch.testing.assert_close(got, ops.energy.__wrapped__(x), rtol=1e-4, atol=1e-2)
        facts = {{"threads": torch.get_num_threads(), "target": ops.energy.loaded_target()}}
        print("RESULT: " + json.dumps(facts))
        """,
    )
    proc = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=_env(tmp_path, AOT_BUILD_STRICT="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    facts = _result(proc)
    assert facts["threads"] == threads
    assert facts["target"] is not None
