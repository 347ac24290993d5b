"""docs/configuration.md matches the sources it documents.

The environment table is generated from ``k8s/serve/settings.py``'s table of variables, and the
CRD and Helm values sections from their files, by ``hack/docs/reference.py``; all must be up to
date. Beside that, the environment table is checked against the code: every variable named in
``k8s/serve/settings.py``, ``cli/main.py`` and ``db/dsn.py`` is in it and nothing else, and each
documented default is the code's (the dataclass field's, or the literal where a variable is read
elsewhere).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import yaml

from pgsched.k8s.serve import settings

ROOT = Path(__file__).parents[2]
DOC = ROOT / "docs" / "configuration.md"
SOURCES = [
    ROOT / "operator/pgsched/k8s/serve/settings.py",
    ROOT / "operator/pgsched/cli/main.py",
    ROOT / "operator/pgsched/db/dsn.py",
]
# Every variable the code names, as a string of its own ("PGSCHED_X").
_NAMED = re.compile(r'"(PGSCHED_[A-Z_]+)"')
# A variable read outside the settings' table, with its default if the read states one:
# os.environ.get("PGSCHED_X", default) (cli/main.py), or a module constant naming it
# (db/dsn.py: VARIABLE = "PGSCHED_DSN").
_READ_ELSEWHERE = re.compile(
    r'get\(\s*"(PGSCHED_[A-Z_]+)"(?:\s*,\s*([^,)\n]+))?|^[A-Z_]+ = "(PGSCHED_[A-Z_]+)"$',
    re.MULTILINE,
)
_ROW = re.compile(r"^\| `(PGSCHED_[A-Z_]+)` \|\s*([^|]*?)\s*\|", re.MULTILINE)


def reference():
    spec = importlib.util.spec_from_file_location("reference", ROOT / "hack/docs/reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def source_variables() -> set[str]:
    return {name for path in SOURCES for name in _NAMED.findall(path.read_text())}


def elsewhere_defaults() -> dict[str, str | None]:
    """The variables read outside the table (cli/main.py, db/dsn.py), with the default
    their read states (None: it states none)."""
    found: dict[str, str | None] = {}
    for path in SOURCES[1:]:
        for read, default, constant in _READ_ELSEWHERE.findall(path.read_text()):
            name = read or constant
            if default and not found.get(name):
                found[name] = default.strip().strip('"')
            else:
                found.setdefault(name, None)
    return found


def documented_variables() -> dict[str, str]:
    section = DOC.read_text().split("## 1.")[1].split("## 2.")[0]
    return {name: cell.strip().strip("`") for name, cell in _ROW.findall(section)}


def same(documented: str, source: str) -> bool:
    try:
        return float(documented) == float(source)
    except ValueError:
        return documented == source


def test_every_operator_variable_is_documented_and_nothing_else():
    assert documented_variables().keys() == source_variables()
    assert [variable.name for variable in settings.VARIABLES] == list(documented_variables())


def test_the_variables_read_elsewhere_are_the_tables_rows_without_a_reader():
    elsewhere = {variable.name for variable in settings.VARIABLES if variable.read is None}
    assert elsewhere == elsewhere_defaults().keys()


def test_documented_defaults_are_the_code_defaults():
    documented = documented_variables()
    wrong = {
        name: (documented[name], default)
        for name, default in elsewhere_defaults().items()
        if default and not default.startswith("os.") and not same(documented[name], default)
    }
    for variable in settings.VARIABLES:
        default = variable.default
        if variable.read is None or default is settings.REQUIRED:
            continue  # read elsewhere: above; required: below
        # A cell of its own: empty (unset, no default worth naming), or "required" (an
        # empty default the settings refuse, with a message of their own).
        if variable.shown is not None:
            if documented[variable.name] != variable.shown or default not in ("", ()):
                wrong[variable.name] = (documented[variable.name], default)
            continue
        shown = ",".join(default) if isinstance(default, tuple) else default
        shown = "" if shown is None else str(shown).lower() if isinstance(shown, bool) else shown
        if not same(documented[variable.name], str(shown)):
            wrong[variable.name] = (documented[variable.name], default)
    assert not wrong, f"documented vs code default: {wrong}"


def test_required_variables_say_so():
    documented = documented_variables()
    assert documented["PGSCHED_DSN"] == "required" and documented["PGSCHED_IMAGE"] == "required"
    required = {
        variable.name for variable in settings.VARIABLES if variable.default is settings.REQUIRED
    }
    assert required == {"PGSCHED_DSN", "PGSCHED_IMAGE"}


def test_generated_sections_are_up_to_date():
    assert reference().main(["--check"]) == 0, "run: python hack/docs/reference.py"


def test_every_crd_spec_field_is_in_the_reference():
    crd = yaml.safe_load((ROOT / "crds/scheduledjobs.pgsched.dev.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    text = DOC.read_text()
    for name in spec["properties"]:
        assert f"| `spec.{name}` |" in text, name


def test_a_new_crd_field_would_make_the_reference_stale(tmp_path):
    crd = yaml.safe_load((ROOT / "crds/scheduledjobs.pgsched.dev.yaml").read_text())
    properties = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    properties["spec"]["properties"]["priority"] = {"type": "integer", "description": "new"}
    changed = tmp_path / "crd.yaml"
    changed.write_text(yaml.safe_dump(crd))
    section = reference().crd_section(changed)
    assert "| `spec.priority` | integer |" in section
    assert section not in DOC.read_text()


def test_helm_values_with_their_comments_become_rows(tmp_path):
    values = tmp_path / "values.yaml"
    values.write_text(
        "# -- Operator replicas; one leads each tick.\nreplicaCount: 2\n"
        "metrics:\n  # Serve /metrics on this port.\n  port: 9090\n"
    )
    section = reference().values_section(values)
    assert "| `replicaCount` | `2` | Operator replicas; one leads each tick. |" in section
    assert "| `metrics.port` | `9090` | Serve /metrics on this port. |" in section
