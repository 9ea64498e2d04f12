"""``python -m aot_build.compile CONFIG.json``: the build's child process (see driver.py).

A build that changed nothing since a recorded one ships that build's artifacts without
importing torch (see reuse.py); any other runs the driver."""

from __future__ import annotations

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
        from ..build_config import BuildConfig
        from ..errors import ConfigError
        from . import reuse

        try:
            config = BuildConfig.read(Path(argv[0]))
        except ConfigError:
            config = None  # the driver says why
        environ = dict(os.environ)
        if config is not None and reuse.recordable(config, environ):
            key = reuse.record_key(config, environ)
            got = reuse.reuse(config, environ, key)
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
                    f"the wheel; build cache {config.cache_dir}: {got.libraries} hit(s), 0 compiled "
                    "(the previous build reused)"
                )
                return 0
    from .driver import main as driver_main

    return driver_main(argv, record=key)


raise SystemExit(main(sys.argv[1:]))
