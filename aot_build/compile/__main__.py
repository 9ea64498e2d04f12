"""``python -m aot_build.compile CONFIG.json``: the build's child process (see driver.py)."""

from .driver import main

raise SystemExit(main())
