"""Log formats: JSON lines with the run context, and the same fields in text."""

from __future__ import annotations

import io
import json
import logging

import pytest

from k8sfixtures import definition, run
from pgsched import logs


def record_with(formatter: logging.Formatter, emit) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger(f"pgsched.test.{id(stream)}")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    emit(logger)
    return stream.getvalue()


def test_json_lines_carry_the_run_context_of_a_run_logger():
    line = record_with(
        logs.JsonFormatter(),
        lambda logger: logs.for_run(logger, run(id=7, attempt=2), definition()).info(
            "run %s: created Job %s", 7, "nightly-report-7"
        ),
    )
    entry = json.loads(line)
    assert entry["message"] == "run 7: created Job nightly-report-7"
    assert (entry["run_id"], entry["definition"], entry["attempt"]) == (7, "jobs/nightly-report", 2)
    assert entry["level"] == "INFO" and entry["logger"].startswith("pgsched.test")
    assert entry["timestamp"].endswith("+00:00")


def test_json_lines_without_a_run_have_no_context_fields_and_keep_tracebacks():
    def emit(logger):
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logger.exception("tick failed")

    entry = json.loads(record_with(logs.JsonFormatter(), emit))
    assert not {"run_id", "definition", "attempt"} & entry.keys()
    assert "RuntimeError: boom" in entry["exception"]


def test_labels_from_a_job_become_the_same_fields():
    adapter = logs.for_labels(
        logging.getLogger("x"), run_id="42", namespace="jobs", name="report", attempt="3"
    )
    assert adapter.extra == {"run_id": 42, "definition": "jobs/report", "attempt": 3}


def test_text_lines_append_the_context_in_brackets():
    line = record_with(
        logs.TextFormatter(),
        lambda logger: logs.for_run(logger, run(id=7), definition()).warning("lease lost"),
    )
    assert line.rstrip().endswith("lease lost [run_id=7 definition=jobs/nightly-report attempt=1]")


def test_a_call_can_add_fields_to_a_run_logger():
    line = record_with(
        logs.JsonFormatter(),
        lambda logger: logs.for_run(logger, run(id=7), None).info("x", extra={"attempt": 5}),
    )
    assert json.loads(line)["attempt"] == 5 and "definition" not in json.loads(line)


def test_an_unknown_format_is_refused_with_an_example():
    with pytest.raises(ValueError, match="example: PGSCHED_LOG_FORMAT=json"):
        logs.setup("INFO", "xml")
