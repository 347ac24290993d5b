"""What every benchmark hands back: a table of figures with their baselines and ratios,
the floors from the issues (met or not), notes, and where its JSON and PNG went.

Tables print to the terminal; the same rows go to ``bench/results/<name>.json`` (ignored
by git — rerun to regenerate) and the plots to ``bench/results/<name>*.png`` (committed, so
the README can show them).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True)
class Floor:
    """A pass/fail line from an issue, e.g. 'dispatcher >= 25% of raw at batch 50'."""

    what: str
    value: float
    limit: float
    higher_is_better: bool = True

    @property
    def met(self) -> bool:
        if math.isnan(self.value):
            return False
        return self.value >= self.limit if self.higher_is_better else self.value <= self.limit


@dataclass
class Report:
    name: str
    title: str
    columns: list[str]
    rows: list[dict[str, Any]] = field(default_factory=list)
    floors: list[Floor] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    plots: list[str] = field(default_factory=list)

    def add(self, **row: Any) -> None:
        self.rows.append(row)

    def floor(
        self, what: str, value: float, limit: float, *, higher_is_better: bool = True
    ) -> None:
        self.floors.append(Floor(what, value, limit, higher_is_better))


def emit(report: Report, *, out_dir: Path, context: dict[str, Any]) -> Path:
    """Print the table and floors, write the JSON; returns the JSON path."""
    print(f"\n== {report.name}: {report.title}")
    print(format_table(report.columns, report.rows))
    for item in report.floors:
        mark = "MET " if item.met else "MISSED"
        cmp = ">=" if item.higher_is_better else "<="
        print(f"  floor {mark}  {item.what}: {item.value:.3g} (needs {cmp} {item.limit:g})")
    for note in report.notes:
        print(f"  note: {note}")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{report.name}.json"
    payload = {
        "name": report.name,
        "title": report.title,
        "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "context": context,
        "columns": report.columns,
        "rows": report.rows,
        "floors": [{**asdict(item), "met": item.met} for item in report.floors],
        "notes": report.notes,
        "plots": report.plots,
        "data": report.data,
    }
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return path


def format_table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    cells = [[cell(row.get(column)) for column in columns] for row in rows]
    widths = [
        max([len(column)] + [len(line[i]) for line in cells]) for i, column in enumerate(columns)
    ]
    lines = ["  ".join(column.ljust(width) for column, width in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * width for width in widths))
    for line in cells:
        lines.append("  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True)))
    return "\n".join(lines)


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return "n/a"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"
    return str(value)


def plot_path(out_dir: Path, name: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir / f"{name}.png"


def save_plot(fig: Any, out_dir: Path, name: str) -> str:
    """Lay out, save as ``<name>.png`` in ``out_dir`` and close a figure; its file name."""
    fig.tight_layout()
    path = plot_path(out_dir, name)
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path.name


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only backend (no display on CI or servers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
