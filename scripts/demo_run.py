"""Run example_pkg's entries as a user would, then time a cold start three ways.

Each timing is a fresh interpreter with an empty inductor cache: eager Python, torch.compile,
and the installed wheel's shipped artifacts; counted after ``import torch`` (the package's
import and the first call), the median of RUNS processes (torch.compile: one, it takes tens
of seconds).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import warnings

#: Fresh processes per way of running (the median is printed).
RUNS = 5
#: torch warns on import when numpy is absent (this environment has only the wheel's requirements)
QUIET = ("ignore", "Failed to initialize NumPy")

CHILD = r"""
import time, warnings
warnings.filterwarnings({quiet[0]!r}, message={quiet[1]!r})
import torch
t0 = time.perf_counter()
import example_pkg
x = torch.randn(4, 32, 64)
fn = {mode!r}
entry = example_pkg.attention_block
f = entry if fn == "aot_build" else entry.__wrapped__
if fn == "torch.compile":
    f = torch.compile(f)
with torch.no_grad():
    y = f(x)
t1 = time.perf_counter()
with torch.no_grad():
    for _ in range(20):
        f(x)
    t2 = time.perf_counter()
    for _ in range(200):
        f(x)
    t3 = time.perf_counter()
print(f"{{t1 - t0:.4f}} {{(t3 - t2) / 200 * 1e6:.1f}}")
"""


def cold(mode: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        if mode == "torch.compile":  # torch.compile needs a compiler: give it the system's
            env["PATH"] = os.environ["PATH"] + os.pathsep + "/usr/bin"
        out = subprocess.run(
            [sys.executable, "-c", CHILD.format(mode=mode, quiet=QUIET)],
            env=env,
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise SystemExit(f"{mode} failed:\n{out.stderr[-2000:]}")
        first, steady = out.stdout.split()[-2:]
        return float(first), float(steady)


def coldest(mode: str, runs: int) -> tuple[float, float]:
    """Medians of ``runs`` cold starts."""
    samples = [cold(mode) for _ in range(runs)]
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


def main() -> None:
    warnings.filterwarnings(QUIET[0], message=QUIET[1])
    import torch

    import example_pkg
    from aot_build.errors import FallbackWarning

    assert shutil.which("g++") is None and shutil.which("cc") is None, "a compiler is on PATH"
    x = torch.randn(4, 32, 64)
    images = torch.rand(8, 3, 64, 64) * 255
    with torch.no_grad():
        for name, entry, args in [
            ("mlp_block", example_pkg.mlp_block, (x,)),
            ("attention_block", example_pkg.attention_block, (x,)),
            ("normalize", example_pkg.normalize, (images,)),
            ("split_heads_stats", example_pkg.split_heads_stats, (x, 4)),
        ]:
            got, _ = torch.utils._pytree.tree_flatten(entry(*args))
            want, _ = torch.utils._pytree.tree_flatten(entry.__wrapped__(*args))
            same = len(got) == len(want) and all(
                torch.allclose(a, b, atol=1e-5) for a, b in zip(got, want, strict=True)
            )
            print(f"  {name:<18} artifact {entry.loaded_target()}  equals eager: {same}")
        # one dynamic artifact serves every batch size in 2..64, one more serves batch 1
        with warnings.catch_warnings():
            warnings.simplefilter("error", FallbackWarning)  # a fallback to Python would raise
            for batch in (1, 3, 17, 64):
                xb = torch.randn(batch, 32, 64)
                want = example_pkg.attention_block.__wrapped__(xb)
                ok = torch.allclose(example_pkg.attention_block(xb), want, atol=1e-5)
                print(f"  attention_block at batch {batch:<3} compiled, equals eager: {ok}")

    print(
        "\ncold start of attention_block, fresh processes, empty inductor cache, after import torch "
        f"(import example_pkg -> first result; median of {RUNS}, torch.compile: 1):"
    )
    rows = {
        mode: coldest(mode, 1 if mode == "torch.compile" else RUNS)
        for mode in ("eager", "torch.compile", "aot_build")
    }
    for mode, (first, steady) in rows.items():
        print(f"  {mode:<14} {first * 1e3:9.1f} ms to first result   {steady:8.1f} us per call after")
    saved = rows["torch.compile"][0] - rows["aot_build"][0]
    over = (rows["aot_build"][0] - rows["eager"][0]) * 1e3
    print(
        f"\naot_build saved {saved:.2f} s of torch.compile's cold start on the first call "
        f"({over:+.1f} ms against eager), with no C++ compiler and nothing written to disk."
    )


if __name__ == "__main__":
    main()
