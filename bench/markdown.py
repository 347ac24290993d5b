"""``python -m bench.markdown [name ...]``: the results JSON as markdown tables.

The numbers in ``bench/README.md`` are pasted from this output, so they are exactly what
the run printed (the JSON files themselves are not committed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.report import RESULTS, cell


def table(columns: list[str], rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(cell(row.get(column)) for column in columns) + " |")
    return "\n".join(lines)


def render(path: Path) -> str:
    payload = json.loads(path.read_text())
    out = [
        f"### {payload['name']}: {payload['title']}",
        "",
        table(payload["columns"], payload["rows"]),
        "",
    ]
    for floor in payload["floors"]:
        cmp = ">=" if floor["higher_is_better"] else "<="
        mark = "met" if floor["met"] else "**missed**"
        out.append(
            f"- floor {mark}: {floor['what']} = {floor['value']:.3g} (needs {cmp} {floor['limit']:g})"
        )
    out += [f"- {note}" for note in payload["notes"]]
    context = payload["context"]
    out.append(
        f"- run: {context['duration_seconds']}s, load average before/after "
        f"{context['machine']['load_average']} / {context['load_average_after']}"
    )
    return "\n".join(out) + "\n"


def main(names: list[str]) -> int:
    paths = [RESULTS / f"{name}.json" for name in names] or sorted(RESULTS.glob("*.json"))
    for path in paths:
        print(render(path))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
