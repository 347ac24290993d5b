"""What the operational commands print: aligned tables for people, JSON for scripts.

Every command builds plain data first (dicts, lists, datetimes) and hands it here, so the
table and the JSON can never say different things. Tables follow kubectl's look (upper-case
headers, two spaces between columns, ``-`` for nothing); JSON is stable, with instants in
UTC ISO 8601 (``2026-06-01T06:00:00Z``) whatever zone the table shows them in.

Progress of long operations goes to stderr, so ``-o json`` output stays parseable.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, TextIO
from zoneinfo import ZoneInfo

from pgsched import wording
from pgsched.engine import run_json
from pgsched.engine.run_json import utc_iso as utc_iso  # the CLI's instants, as in its JSON

FORMATS = ("table", "json")
NOTHING = "-"


def add_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--output",
        choices=FORMATS,
        default="table",
        help="table (default, for people) or json (for scripts)",
    )


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, out: TextIO | None = None
) -> None:
    """Print rows under upper-case headers, columns aligned, ``-`` for None."""
    cells = [[cell(value) for value in row] for row in rows]
    widths = [len(header) for header in headers]
    for row in cells:
        widths = [max(width, len(text)) for width, text in zip(widths, row, strict=True)]
    stream = out or sys.stdout
    for row in [[header.upper() for header in headers], *cells]:
        line = "  ".join(text.ljust(width) for text, width in zip(row, widths, strict=True))
        print(line.rstrip(), file=stream)


def fields(pairs: Sequence[tuple[str, Any]], *, out: TextIO | None = None) -> None:
    """Print ``Label:  value`` lines, values aligned (like ``kubectl describe``)."""
    width = max(len(label) for label, _ in pairs) + 2
    stream = out or sys.stdout
    for label, value in pairs:
        print(f"{label + ':':<{width}}{cell(value)}", file=stream)


def emit_json(data: Any, *, out: TextIO | None = None) -> None:
    print(json.dumps(data, indent=2, default=run_json.encode), file=out or sys.stdout)


def cell(value: Any) -> str:
    if value is None or value == "":
        return NOTHING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return local_time(value, None)
    if isinstance(value, timedelta):
        return duration(value)
    return str(value)


def local_time(moment: datetime | None, zone: ZoneInfo | None) -> str:
    """``2026-06-01 08:00:00 EEST`` in ``zone`` (UTC when None)."""
    return NOTHING if moment is None else wording.local(moment, zone or ZoneInfo("UTC"))


def duration(span: timedelta | None) -> str:
    """``850ms``, ``4.2s``, ``3m05s``, ``2h03m``, ``1d02h`` (``wording.duration``)."""
    return NOTHING if span is None else wording.duration(span)


class Progress:
    """One status line on stderr: rewritten in place on a terminal, else printed at most
    every ``every`` seconds (so CI logs show progress without a line per item)."""

    def __init__(self, *, stream: TextIO | None = None, every: float = 5.0) -> None:
        self._stream = stream or sys.stderr
        self._tty = self._stream.isatty()
        self._every = every
        self._last = 0.0
        self._shown = ""

    def update(self, text: str, *, force: bool = False) -> None:
        now = time.monotonic()
        if text == self._shown or (not self._tty and not force and now - self._last < self._every):
            return
        self._last, self._shown = now, text
        if self._tty:
            self._stream.write(f"\r\033[K{text}")
        else:
            self._stream.write(f"{text}\n")
        self._stream.flush()

    def done(self, text: str) -> None:
        self.update(text, force=True)
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()
