"""The database connection string, from the environment: ``PGSCHED_DSN`` or a file.

A connection string holds a password. In an environment variable it is shown by anything
that may read the process's environment or the pod spec's resolved values (``kubectl
describe`` of a pod that copies it, ``/proc/<pid>/environ``, crash reporters), so the chart
mounts the Secret as a file and sets ``PGSCHED_DSN_FILE`` to its path instead. The file's
content, with surrounding whitespace removed, is the connection string; ``PGSCHED_DSN``,
when set, wins (as a ``--dsn`` flag does). The file is read once, when a program starts: a
changed Secret takes effect when the pods are replaced (the chart's checksum annotation
does that on ``helm upgrade``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pgsched.validation import FieldError, SettingsError

VARIABLE = "PGSCHED_DSN"
FILE_VARIABLE = "PGSCHED_DSN_FILE"


def from_environment(env: Mapping[str, str]) -> str:
    """The connection string ``env`` gives; ``SettingsError`` naming the variable if it
    gives none, or names a file that is missing, unreadable or empty."""
    if env.get(VARIABLE):
        return env[VARIABLE]
    path = env.get(FILE_VARIABLE)
    if not path:
        raise _error(
            VARIABLE,
            f"is required (or {FILE_VARIABLE}, the path of a file holding it)",
            f"{FILE_VARIABLE}=/etc/pgsched/database/dsn",
        )
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise _error(
            FILE_VARIABLE,
            f"cannot read {path!r}: {reason}; mount the Secret holding the connection string there",
            f"{FILE_VARIABLE}=/etc/pgsched/database/dsn",
        ) from None
    if not text:
        raise _error(
            FILE_VARIABLE,
            f"{path!r} is empty; it must hold a libpq connection string",
            "host=db.example user=pgsched dbname=pgsched",
        )
    return text


def _error(variable: str, message: str, example: str) -> SettingsError:
    return SettingsError([FieldError(variable, message, example)])
