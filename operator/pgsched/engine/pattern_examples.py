"""A value a parameter's pattern accepts, for the example a refusal gives.

A refusal names the field, the problem and a right example; for a declared pattern such as
``[a-z]{2}-[a-z]+-[0-9]`` the example must be a value the pattern accepts, or it teaches
the wrong thing. The shortest string the pattern's syntax tree spells out is built (the
first alternative, the fewest repetitions, the first character of a class) and kept only if
RE2 — the one matcher of values, ``parameters.matches`` — accepts it. CPython's own regex
parser reads the tree: the common syntax of RE2 and Python, and anything it cannot read,
or a string RE2 then refuses, gives no example rather than a wrong one.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

# CPython's regex parser (the module behind ``re``): its tree is what is walked here.
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

# Tried first, in this order: a value people would write (the pattern may accept one).
COMMON = ("value", "1", "eu", "a", "A", "2026-06-01", "0")
MAX_LENGTH = 200  # a longer example helps nobody; a longer spelling is not tried
_CATEGORY = {
    sre.CATEGORY_DIGIT: "0",
    sre.CATEGORY_NOT_DIGIT: "a",
    sre.CATEGORY_WORD: "a",
    sre.CATEGORY_NOT_WORD: "-",
    sre.CATEGORY_SPACE: " ",
    sre.CATEGORY_NOT_SPACE: "a",
}


class _Unspellable(Exception):
    """The tree has a node this walk does not spell."""


def example_for(pattern: str, accepts: Callable[[str, str], bool]) -> str | None:
    """A value ``accepts(pattern, value)`` takes: a common one, else the shortest the
    pattern spells; None if neither is accepted."""
    for value in COMMON:
        if accepts(pattern, value):
            return value
    try:
        with warnings.catch_warnings():  # Python's syntax warnings about RE2 syntax
            warnings.simplefilter("ignore")
            tree = sre_parse.parse(pattern)
        spelled = _spell(tree, depth=0)
    except (_Unspellable, re.error, RecursionError, OverflowError, ValueError):
        return None
    if len(spelled) > MAX_LENGTH or not accepts(pattern, spelled):
        return None
    return spelled


def _spell(tree: Any, *, depth: int) -> str:
    if depth > 50:
        raise _Unspellable("nested too deep")
    out: list[str] = []
    for op, arg in tree:
        out.append(_node(op, arg, depth))
        if sum(map(len, out)) > MAX_LENGTH:
            raise _Unspellable("too long")
    return "".join(out)


def _node(op: Any, arg: Any, depth: int) -> str:
    if op is sre.LITERAL:
        return chr(arg)
    if op is sre.NOT_LITERAL:
        return "a" if chr(arg) != "a" else "b"
    if op is sre.ANY:
        return "a"
    if op is sre.AT:
        return ""
    if op is sre.IN:
        return _in_class(arg)
    if op is sre.CATEGORY:
        return _CATEGORY.get(arg, "a")
    if op is sre.BRANCH:
        return _spell(arg[1][0], depth=depth + 1)
    if op is sre.SUBPATTERN:
        return _spell(arg[-1], depth=depth + 1)
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", None)):
        low, _high, item = arg
        return _spell(item, depth=depth + 1) * int(low)
    raise _Unspellable(str(op))


def _in_class(items: list[tuple[Any, Any]]) -> str:
    if items and items[0][0] is sre.NEGATE:
        excluded = {chr(arg) for op, arg in items[1:] if op is sre.LITERAL}
        return next(c for c in "a0-_A" if c not in excluded)
    op, arg = items[0]
    if op is sre.LITERAL:
        return chr(arg)
    if op is sre.RANGE:
        return chr(arg[0])
    if op is sre.CATEGORY:
        return _CATEGORY.get(arg, "a")
    raise _Unspellable(str(op))
