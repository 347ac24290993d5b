"""The image, as far as we can check it without Docker.

There is no Docker on our machines, so the image itself is never built here. Instead:

- hadolint lints the Dockerfile;
- the builder stage's own instructions (ENV, WORKDIR, COPY, RUN) are executed on the host,
  in order, against a build context filtered by ``.dockerignore`` — only the paths where
  the image keeps the wheels and the virtualenv are moved into a temporary directory, and
  ``python``/``pip`` are the checkout's Python 3.11 instead of the base image's;
- the resulting virtualenv's entry points run, its package data is checked, and its
  ``pgsched migrate`` builds the schema in a real database;
- the final stage is read for what a runtime image must (not) contain.

What this cannot catch: a base image that differs from the host's Python, a missing shared
library in the slim image, file ownership inside the image. See the README.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pgsched import __version__
from pgsched.db import connection

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
PACKAGE = ROOT / "operator" / "pgsched"
# Where the image keeps these; the host run puts them in a temporary directory instead.
RELOCATED = {"WHEELS": "wheels", "VENV": "venv"}


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [argument for word, argument in self.instructions if word == keyword]

    def env(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for argument in self.all("ENV"):
            for pair in shlex.split(argument):
                key, _, value = pair.partition("=")
                values[key] = value
        return values


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with continuation lines joined."""
    logical: list[str] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        word, _, argument = line.partition(" ")
        word, argument = word.upper(), argument.strip()
        if word == "FROM":
            parts = argument.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif word == "ARG" and not stages:
            key, _, value = argument.partition("=")
            args[key] = value
        else:
            stages[-1].instructions.append((word, argument))
    return args, stages


def dockerignore_excludes(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: index + 1]) for index in range(len(parts))]
    excluded = False
    for negated, pattern in rules:
        if any(pattern.fullmatch(candidate) for candidate in candidates):
            excluded = not negated
    return excluded


def dockerignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        regex = ""
        for token in re.split(r"(\*\*/|\*\*|\*|\?)", pattern):
            regex += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
                token, re.escape(token)
            )
        rules.append((negated, re.compile(regex)))
    return rules


def build_context(destination: Path) -> Path:
    """The checkout's files that `docker build .` would send, given .dockerignore."""
    rules = dockerignore_rules(DOCKERIGNORE.read_text())
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for relative in tracked:
        if not dockerignore_excludes(relative, rules) and (ROOT / relative).is_file():
            target = destination / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / relative, target)
    return destination


def builder_stage() -> Stage:
    _, stages = parse_dockerfile(DOCKERFILE.read_text())
    [builder] = [stage for stage in stages if stage.name == "builder"]
    return builder


def final_stage() -> Stage:
    _, stages = parse_dockerfile(DOCKERFILE.read_text())
    return stages[-1]


# -- lint and structure -----------------------------------------------------------------------


def test_dockerfile_passes_hadolint():
    hadolint = Path(sys.executable).parent / "hadolint"
    result = subprocess.run(
        [str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True
    )
    assert result.returncode == 0, f"hadolint:\n{result.stdout}{result.stderr}"


def test_both_stages_share_one_pinned_python_311_slim_base():
    args, stages = parse_dockerfile(DOCKERFILE.read_text())
    bases = {stage.base for stage in stages}
    assert bases == {"python:3.11-slim"}, bases
    assert args["PYTHON_IMAGE"] == "python:3.11-slim"


def test_final_stage_takes_only_the_virtualenv_and_examples_and_runs_as_uid_10001():
    final = final_stage()
    copies = final.all("COPY")
    from_builder = [copy for copy in copies if copy.startswith("--from=")]
    assert from_builder == ["--from=builder /opt/pgsched/venv /opt/pgsched/venv"]
    assert [copy for copy in copies if not copy.startswith("--from=")] == [
        "examples/pgsched_examples/ /opt/pgsched/examples/pgsched_examples/"
    ]
    assert final.all("USER") == ["10001:10001"]
    assert final.all("ENTRYPOINT") == ['["pgsched"]']
    env = final.env()
    assert env["PATH"].startswith("/opt/pgsched/venv/bin:")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert (env["HOME"], env["TMPDIR"]) == ("/tmp", "/tmp")
    [cleanup] = final.all("RUN")
    assert "pip uninstall --yes" in cleanup and "pip setuptools wheel" in cleanup


def test_dockerignore_sends_the_package_and_leaves_out_caches_and_the_rest():
    rules = dockerignore_rules(DOCKERIGNORE.read_text())
    assert not dockerignore_excludes("operator/pgsched/sql/migrations/0001_schema.sql", rules)
    assert not dockerignore_excludes("examples/pgsched_examples/ledger_import.py", rules)
    assert not dockerignore_excludes("pyproject.toml", rules)
    assert dockerignore_excludes("operator/pgsched/__pycache__/spec.cpython-311.pyc", rules)
    assert dockerignore_excludes(".venv/bin/python", rules)
    assert dockerignore_excludes("tests/conftest.py", rules)
    assert dockerignore_excludes("charts/pgsched/values.yaml", rules)


# -- the builder's steps, run for real ---------------------------------------------------------


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run the builder stage's instructions on the host; return the relocated paths."""
    work = tmp_path_factory.mktemp("image")
    context = build_context(work / "context")
    builder = builder_stage()
    paths = {name: work / folder for name, folder in RELOCATED.items()}
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))
        or key in {"PIP_CERT", "PIP_DEFAULT_TIMEOUT"}
    }
    # `python` and `pip`: the checkout's Python 3.11, as the base image's would be.
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    cwd = work
    for word, argument in builder.instructions:
        if word == "ENV":
            declared = Stage("", None, [(word, argument)]).env()
            env.update(declared)
            env.update({name: str(paths[name]) for name in declared if name in paths})
            # The pip cache changes how fast, not what, pip installs; the image turns it off.
            env.pop("PIP_NO_CACHE_DIR", None)
        elif word == "WORKDIR":
            cwd = work / argument.lstrip("/")
            cwd.mkdir(parents=True, exist_ok=True)
        elif word == "COPY":
            *sources, destination = shlex.split(argument)
            for source in sources:
                origin = context / source
                if origin.is_dir():
                    shutil.copytree(origin, cwd / destination, dirs_exist_ok=True)
                else:
                    (cwd / destination).mkdir(parents=True, exist_ok=True)
                    shutil.copy2(origin, cwd / destination / origin.name)
        elif word == "RUN":
            result = subprocess.run(
                ["/bin/sh", "-c", argument], cwd=cwd, env=env, capture_output=True, text=True
            )
            assert result.returncode == 0, (
                f"RUN {argument}\nexit {result.returncode}\n{result.stdout[-3000:]}"
                f"{result.stderr[-3000:]}"
            )
    return paths


def installed(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a program of the image's virtualenv, away from the checkout (not on sys.path)."""
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(venv.parent), "LANG": "C.UTF-8"}
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        cwd=venv.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_image_entry_points_run_from_the_installed_virtualenv(image_venv):
    venv = image_venv["VENV"]
    version = installed(venv, "pgsched", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"pgsched {__version__}"
    for command in ("operator", "migrate", "heartbeat", "run"):
        result = installed(venv, "pgsched", command, "--help")
        assert result.returncode == 0, f"pgsched {command} --help:\n{result.stderr}"
        assert f"usage: pgsched {command}" in result.stdout
    where = installed(venv, "python", "-c", "import pgsched; print(pgsched.__file__)")
    assert where.stdout.strip().startswith(str(venv)), where


def test_the_image_carries_kopf_for_the_admission_webhook(image_venv):
    """`pip show kopf` on the image's virtualenv (the image itself has no pip)."""
    venv = image_venv["VENV"]
    python = str(venv / "bin" / "python")
    shown = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "show", "kopf"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert "Name: kopf" in shown.stdout
    loaded = installed(venv, "python", "-c", "import pgsched.k8s.serve.webhook")
    assert loaded.returncode == 0, loaded.stderr


def test_image_virtualenv_has_no_pip_and_ships_compiled_bytecode(image_venv):
    venv = image_venv["VENV"]
    assert not (venv / "bin" / "pip").exists()
    assert installed(venv, "python", "-c", "import pip").returncode != 0
    [site] = list((venv / "lib").glob("python3.*/site-packages"))
    # A read-only root filesystem cannot take .pyc files at run time: they must be there.
    assert list((site / "pgsched" / "cli" / "__pycache__").glob("main.*.pyc"))


def test_the_wheel_carries_every_migration_function_and_query_file(image_venv):
    [wheel] = list(image_venv["WHEELS"].glob(f"pgsched-{__version__}-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for folder in ("migrations", "functions", "queries"):
        expected = {
            f"pgsched/sql/{folder}/{path.name}" for path in (PACKAGE / "sql" / folder).glob("*.sql")
        }
        assert expected and expected <= names, f"missing from the wheel: {expected - names}"
    assert "pgsched/py.typed" in names


def test_image_migrate_builds_the_schema_from_the_installed_package_data(image_venv, postgres):
    database = f"image_{uuid.uuid4().hex[:10]}"
    with connection.connect(postgres.dsn()) as admin:
        admin.execute(f"CREATE DATABASE {database}")
    try:
        result = installed(
            image_venv["VENV"], "pgsched", "migrate", "--dsn", postgres.dsn(database)
        )
        assert result.returncode == 0, result.stderr
        latest = max(int(path.name[:4]) for path in (PACKAGE / "sql" / "migrations").glob("*.sql"))
        assert f"schema at version {latest}" in result.stdout
    finally:
        with connection.connect(postgres.dsn()) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
