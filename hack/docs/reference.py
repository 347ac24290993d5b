"""Generate the reference sections of ``docs/configuration.md`` from their sources.

Five sections are generated, between ``<!-- BEGIN GENERATED: name -->`` and
``<!-- END GENERATED: name -->`` markers, so the prose around them stays hand-written:

- ``environment``: every environment variable of the operator, from the table of variables
  in ``operator/pgsched/k8s/serve/settings.py`` (``VARIABLES``: name, default, meaning);
- ``crd``: every field of the ScheduledJob spec, from ``crds/scheduledjobs.pgsched.dev.yaml``
  (type, default, allowed values, description), stopping at ``jobTemplate`` (a batch/v1
  JobTemplateSpec, documented by Kubernetes);
- ``pool``: every field of the ConcurrencyPool spec, from ``crds/concurrencypools.pgsched.dev.yaml``;
- ``policy``: every field of the NotificationPolicy spec, from
  ``crds/notificationpolicies.pgsched.dev.yaml``;
- ``values``: every Helm value, from ``charts/pgsched/values.yaml`` — its default and the
  comment block above it (``# -- text`` or plain ``# text``) — once the chart exists.

``tests/unit/test_docs_configuration.py`` checks that they are up to date, and that the
variables the code reads are the table's.

    python hack/docs/reference.py          # rewrite docs/configuration.md
    python hack/docs/reference.py --check  # exit 1 if it is out of date (what the test does)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"
# Every document that carries generated sections.
DOCS = (DOC,)
CRD = ROOT / "crds" / "scheduledjobs.pgsched.dev.yaml"
POOL_CRD = ROOT / "crds" / "concurrencypools.pgsched.dev.yaml"
POLICY_CRD = ROOT / "crds" / "notificationpolicies.pgsched.dev.yaml"
VALUES = ROOT / "charts" / "pgsched" / "values.yaml"
_SECTION = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<name>[a-z]+) -->\n)(?P<body>.*?)(<!-- END GENERATED: (?P=name) -->)",
    re.DOTALL,
)


def crd_section(crd_path: Path = CRD) -> str:
    document = yaml.safe_load(crd_path.read_text())
    [version] = [item for item in document["spec"]["versions"] if item.get("storage")]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rows = list(_fields(spec, "spec"))
    lines = [
        f"Generated from `{_shown(crd_path)}` (version `{version['name']}`).",
        "",
        "| field | type | default | allowed | description |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| `{path}` | {kind} | {default} | {allowed} | {text} |"
        for path, kind, default, allowed, text in rows
    ]
    return "\n".join(lines) + "\n"


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name


def _fields(schema: dict[str, Any], prefix: str) -> Any:
    required = set(schema.get("required") or [])
    for name, field in (schema.get("properties") or {}).items():
        path = f"{prefix}.{name}"
        kind = field.get("type", "object")
        if kind == "array":
            kind = f"array of {field.get('items', {}).get('type', 'object')}"
        default = (
            f"`{json.dumps(field['default'])}`"
            if "default" in field
            else ("required" if name in required else "")
        )
        allowed = _allowed(field)
        text = " ".join(str(field.get("description", "")).split()).replace("|", "\\|")
        yield path, kind, default, allowed, text
        if name != "jobTemplate" and field.get("properties"):
            yield from _fields(field, path)
        if field.get("items", {}).get("properties"):  # a list of objects: its items' fields
            yield from _fields(field["items"], f"{path}[]")


def _allowed(field: dict[str, Any]) -> str:
    if "enum" in field:
        return ", ".join(f"`{value}`" for value in field["enum"])
    bounds = [field.get("minimum"), field.get("maximum")]
    if bounds == [None, None]:
        return ""
    low = "" if bounds[0] is None else f"{bounds[0]:g}"
    high = "" if bounds[1] is None else f"{bounds[1]:g}"
    return f"{low}..{high}"


def environment_section() -> str:
    from pgsched.k8s.serve import settings  # the operator's own table; imported only here

    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for variable in settings.VARIABLES:
        default = f" {variable.shown_default} " if variable.shown_default else " "
        meaning = variable.meaning.replace("|", "\\|")
        lines.append(f"| `{variable.name}` |{default}| {meaning} |")
    return "\n".join(lines) + "\n"


def values_section(values_path: Path = VALUES) -> str:
    if not values_path.exists():
        return (
            f"The Helm chart (`{_shown(values_path.parent)}`) is not in this tree yet."
            " This section is generated from its `values.yaml` (each value's default and the"
            " comment above it) by `python hack/docs/reference.py` once it is.\n"
        )
    lines = [
        f"Generated from `{_shown(values_path)}`.",
        "",
        "| value | default | description |",
        "|---|---|---|",
    ]
    for path, default, text in _values(values_path.read_text()):
        shown = json.dumps(default) if default is not None else "null"
        lines.append(f"| `{path}` | `{shown}` | {text.replace('|', chr(92) + '|')} |")
    return "\n".join(lines) + "\n"


def _values(text: str) -> list[tuple[str, Any, str]]:
    """Leaf values (and empty maps/lists) with their dotted path and comment."""
    data = yaml.safe_load(text) or {}
    comments = _comments(text)
    found: list[tuple[str, Any, str]] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict) and node:
            for key, child in node.items():
                walk(child, f"{path}.{key}" if path else str(key))
        else:
            found.append((path, node, comments.get(path, "")))

    walk(data, "")
    return found


def _comments(text: str) -> dict[str, str]:
    """The comment block right above each key, by dotted path (indentation gives nesting)."""
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    found: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip().removeprefix("--").strip())
            continue
        match = re.match(r"^(\s*)([A-Za-z0-9_.-]+):", line)
        if not match:
            if not stripped:
                pending = []
            continue
        indent, key = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, key))
        path = ".".join(part for _, part in stack)
        if pending:
            found[path] = " ".join(part for part in pending if part)
        pending = []
    return found


def render(doc: str) -> str:
    generators = {
        "environment": environment_section,
        "crd": crd_section,
        "pool": lambda: crd_section(POOL_CRD),
        "policy": lambda: crd_section(POLICY_CRD),
        "values": values_section,
    }

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in generators:
            raise SystemExit(f"{DOC}: unknown generated section {name!r}")
        return f"{match.group(1)}{generators[name]()}{match.group(4)}"

    return _SECTION.sub(replace, doc)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the doc is out of date")
    args = parser.parse_args(argv)
    stale = []
    for doc in DOCS:
        current = doc.read_text()
        fresh = render(current)
        if fresh == current:
            continue
        stale.append(doc)
        if not args.check:
            doc.write_text(fresh)
    if args.check and stale:
        names = ", ".join(str(doc.relative_to(ROOT)) for doc in stale)
        print(f"{names} out of date: run python hack/docs/reference.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
