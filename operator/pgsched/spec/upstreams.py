"""``spec.after``: the upstream ScheduledJobs a job runs after, and on which outcome.

Only the names and outcomes are checked here. Whether the upstreams exist, and whether
they make a cycle, needs the other definitions: the engine finds that (``engine.chain``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

from pgsched import names
from pgsched.engine import chain
from pgsched.spec.checker import Checker, describe

MAX_UPSTREAMS = 20


def after(check: Checker) -> tuple[chain.Upstream, ...]:
    value = check.spec.get("after")
    example = "after: [{scheduledJob: extract, outcome: Succeeded}]"
    if value is None:
        return ()
    if not isinstance(value, list):
        check.fail("after", f"must be a list of upstreams, got {describe(value)}", example)
        return ()
    if len(value) > MAX_UPSTREAMS:
        check.fail("after", f"names {len(value)} upstreams, at most {MAX_UPSTREAMS}", example)
        return ()
    found: list[chain.Upstream] = []
    for index, item in enumerate(value):
        path = f"after[{index}]"
        if not isinstance(item, Mapping):
            check.fail(path, f"must be an object, got {describe(item)}", example)
            continue
        if True in item or "true" in item:
            # YAML 1.1 (kubectl, PyYAML) reads an unquoted `on:` key as the boolean true.
            check.fail(
                f"{path}.on", "is not a field (YAML reads `on` as true): use outcome", example
            )
        rest = {key: value for key, value in item.items() if key not in (True, "true")}
        check.unknown(rest, {"scheduledJob", "outcome"}, f"{path}.")
        name = item.get("scheduledJob")
        if not isinstance(name, str) or not names.OBJECT_NAME.match(name):
            check.fail(
                f"{path}.scheduledJob",
                f"{name!r} is not a ScheduledJob name in this namespace",
                "scheduledJob: extract",
            )
            continue
        if any(upstream.scheduled_job == name for upstream in found):
            check.fail(f"{path}.scheduledJob", f"{name!r} is named twice", example)
            continue
        outcome = check.choice(item, "outcome", path=f"{path}.outcome", options=chain.OUTCOMES)
        found.append(chain.Upstream(name, cast(chain.Outcome, outcome)))
    return tuple(found)
