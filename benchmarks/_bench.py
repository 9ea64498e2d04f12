"""What the benchmark scripts share: how a worker reports its result or its error, and the
driver's log lines. Standard library only (workers import it before torch)."""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any


def error_text(exc: BaseException, limit: int = 2500) -> str:
    """The end of a traceback: enough to see what failed, short enough for a report."""
    text = "".join(traceback.format_exception(exc)).strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def emit_result(mark: str, result: dict[str, Any]) -> None:
    """A worker's result: one line, ``mark`` then JSON, read back by the driver."""
    sys.stdout.flush()
    print(mark + json.dumps(result, default=str), flush=True)


def logger(name: str) -> Callable[[str], None]:
    def log(msg: str) -> None:
        print(f"[{name} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    return log


def number(v: float | None, digits: int = 1) -> str:
    """A table cell: thousands separators, "—" for a missing value."""
    return "—" if v is None else f"{v:,.{digits}f}"


def first_line(err: str) -> str:
    """The line of a traceback that says what went wrong."""
    lines = [ln.strip() for ln in err.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ":" in ln and not ln.startswith(("File ", "^", "~")):
            return ln[:300]
    return lines[-1][:300] if lines else err[:300]
