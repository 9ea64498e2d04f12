"""``python -m aot_build.compile CONFIG.json``: the build's child process (see driver.py).

A build that changed nothing since a recorded one ships that build's artifacts without
importing torch (see reuse.py); any other runs the driver."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def _say(msg: str) -> None:
    print(f"aot-build: {msg}", flush=True)


def main(argv: list[str]) -> int:
    t0 = time.perf_counter()
    key = None
    if len(argv) == 1:
        from . import reuse

        job = json.loads(Path(argv[0]).read_text())
        environ = dict(os.environ)
        if reuse.recordable(job, environ):
            key = reuse.record_key(job, environ)
            got = reuse.reuse(job, environ, key)
            if got is not None:
                _say(
                    f"nothing the build reads changed since the build of {got.made} (package files, "
                    "settings, environment, imported modules, compilers): shipping its artifacts, "
                    "nothing exported or compiled"
                )
                for line in got.lines:
                    _say(line)
                _say(
                    f"done in {time.perf_counter() - t0:.1f} s; artifacts add {got.size / 1e6:.2f} MB to "
                    f"the wheel; build cache {job['cache_dir']}: {got.libraries} hit(s), 0 compiled "
                    "(the previous build reused)"
                )
                return 0
    from .driver import main as driver_main

    return driver_main(argv, record=key)


raise SystemExit(main(sys.argv[1:]))
