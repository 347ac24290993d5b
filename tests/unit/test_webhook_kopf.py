"""The one private piece of kopf the admission webhook depends on, checked against the
pinned kopf.

``k8s/serve/webhook.py`` hands ``kopf.operator`` a ``_Forgetful`` memory so that kopf keeps
nothing per object it is asked about (docs/architecture.md, "Why kopf serves admission
only"). ``kopf.operator`` takes it as ``memories``, typed with a class kopf does not
export, ``kopf._core.reactor.inventory.ResourceMemories``, and ``_Forgetful`` overrides its
``recall``. kopf is pinned exactly in pyproject.toml; a new kopf that moves, renames or
reshapes any of this fails here, before the webhook quietly starts remembering again (or
stops starting). Whoever raises the pin reads kopf's changes to these names, then updates
the shapes below.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import tomllib
from collections.abc import Callable
from pathlib import Path

import kopf
from kopf._core.engines import admission as kopf_admission
from kopf._core.reactor import inventory

from pgsched.k8s.serve import webhook

ROOT = Path(__file__).parents[2]
BODY = {"metadata": {"uid": "1", "name": "x", "namespace": "jobs"}}


def shape(function: Callable[..., object]) -> list[tuple[str, str, object]]:
    """A function's parameters: name, kind, default."""
    parameters = inspect.signature(function).parameters.values()
    return [(p.name, p.kind.name, p.default) for p in parameters]


def test_kopf_is_pinned_exactly():
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    [kopf_pin] = [item for item in dependencies if re.match(r"kopf\b", item)]
    assert re.fullmatch(r"kopf==\d+(\.\d+)*", kopf_pin), kopf_pin


def test_the_private_kopf_class_the_webhook_subclasses_keeps_its_name_and_methods():
    assert inventory.ResourceMemories.__name__ == "ResourceMemories"
    assert issubclass(webhook._Forgetful, inventory.ResourceMemories)
    empty = inspect.Parameter.empty
    # The method _Forgetful overrides, and the one through which kopf's admission calls it.
    assert inspect.iscoroutinefunction(inventory.ResourceMemories.recall)
    assert shape(inventory.ResourceMemories.recall) == [
        ("self", "POSITIONAL_OR_KEYWORD", empty),
        ("raw_body", "POSITIONAL_OR_KEYWORD", empty),
        ("memobase", "KEYWORD_ONLY", None),
        ("noticed_by_listing", "KEYWORD_ONLY", False),
        ("ephemeral", "KEYWORD_ONLY", False),
    ]
    assert shape(webhook._Forgetful.recall) == shape(inventory.ResourceMemories.recall)
    assert inspect.iscoroutinefunction(inventory.ResourceMemories.recall_memo)
    assert shape(inventory.ResourceMemories.recall_memo) == [
        ("self", "POSITIONAL_OR_KEYWORD", empty),
        ("raw_body", "POSITIONAL_OR_KEYWORD", empty),
        ("memobase", "KEYWORD_ONLY", None),
        ("ephemeral", "KEYWORD_ONLY", False),
    ]
    assert callable(inventory.ResourceMemories.iter_all_memories)


def test_kopf_still_takes_the_memories_and_asks_them_for_a_memo_on_admission():
    assert "memories" in inspect.signature(kopf.operator).parameters
    assert "memories" in inspect.signature(kopf_admission.serve_admission_request).parameters
    assert issubclass(inventory.ResourceMemories, kopf_admission.MemoGetter)
    assert kopf_admission.MemoGetter.__abstractmethods__ == frozenset({"recall_memo"})


def test_an_update_kopf_asks_about_is_remembered_by_kopf_but_not_by_the_webhook():
    """The call kopf's admission makes for an UPDATE (``recall_memo``, not ephemeral):
    kopf's own memories keep the object; the webhook's keep nothing."""
    kopfs = inventory.ResourceMemories()
    asyncio.run(kopfs.recall_memo(BODY, memobase=kopf.Memo(), ephemeral=False))
    assert len(list(kopfs.iter_all_memories())) == 1

    ours = webhook._Forgetful()
    asyncio.run(ours.recall_memo(BODY, memobase=kopf.Memo(), ephemeral=False))
    assert list(ours.iter_all_memories()) == []
