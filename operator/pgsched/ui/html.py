"""HTML building blocks of the UI: escaping, the page layout and its inline stylesheet."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from html import escape
from urllib.parse import urlencode
from zoneinfo import ZoneInfo

from pgsched import wording

NOTHING = "—"

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#24324a;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:600}header .who{margin-left:auto;opacity:.8}
form.logout{display:inline;margin-left:8px}
main{padding:12px 16px;max-width:1400px}h1{font-size:20px;margin:8px 0}h2{font-size:16px;margin:18px 0 6px}
table{border-collapse:collapse;background:#fff}th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#eef1f5}form.filters{margin:8px 0;display:flex;gap:8px;align-items:end;flex-wrap:wrap}
.strip{display:flex;gap:2px}.cell{display:inline-block;width:12px;height:16px;border-radius:2px}
.COMPLETED{background:#2e9e44}.FAILED{background:#d6333a}.SKIPPED{background:#c9b458}
.CANCELLED{background:#8a63c7}.RUNNING{background:#2f7fd8}.QUEUED{background:#b8c2cc}
.badge{padding:1px 6px;border-radius:8px;font-size:12px;color:#fff}
.ready{background:#2e9e44}.suspended{background:#c98a1b}.failing{background:#d6333a}.rejected{background:#6b6b6b}
.trigger{font-size:11px;border:1px solid #999;border-radius:3px;padding:0 3px;color:#444}
.trigger-manual{border-color:#2f7fd8;color:#2f7fd8}.trigger-backfill{border-color:#8a63c7;color:#8a63c7}
.trigger-retry{border-color:#d6333a;color:#d6333a}
.day{position:relative;height:22px;background:#fff;border:1px solid #ddd;margin:2px 0 2px 110px}
.daylabel{position:absolute;left:-108px;width:104px;font-size:12px;top:3px}
.bar{position:absolute;top:4px;height:14px;min-width:3px;border-radius:2px;opacity:.9}
.mark{position:absolute;top:0;width:2px;height:22px;background:#c9b458}
.dst{position:absolute;top:-2px;width:0;height:26px;border-left:2px dashed #e07b00}
.hours{margin-left:110px;display:flex;justify-content:space-between;font-size:11px;color:#777}
tr.dstrow td{background:#fff4e5}tr.skipped td{background:#fbf8e9}
pre{background:#fff;border:1px solid #ddd;padding:8px;overflow:auto;max-height:480px}
.error{background:#fff;border-left:4px solid #d6333a;padding:8px 12px}
.answer{background:#fff;border-left:4px solid #2f7fd8;padding:8px 12px}
"""


def e(value: object) -> str:
    """Escaped text; None is shown as a dash."""
    return NOTHING if value is None else escape(str(value))


def link(href: str, text: object, **attributes: str) -> str:
    extra = "".join(f' {key}="{escape(value)}"' for key, value in attributes.items())
    return f'<a href="{escape(href)}"{extra}>{e(text)}</a>'


def url(path: str, params: Mapping[str, object | None] | None = None) -> str:
    query = {key: str(value) for key, value in (params or {}).items() if value not in (None, "")}
    return f"{path}?{urlencode(query)}" if query else path


def table(headers: Iterable[str], rows: Iterable[Iterable[str]], **attributes: str) -> str:
    """A table of already-escaped cells."""
    extra = "".join(f' {key}="{escape(value)}"' for key, value in attributes.items())
    head = "".join(f"<th>{escape(item)}</th>" for item in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table{extra}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def fields(items: Iterable[tuple[str, str]]) -> str:
    """A two-column table of label and already-escaped value."""
    rows = "".join(f"<tr><th>{escape(label)}</th><td>{value}</td></tr>" for label, value in items)
    return f"<table class='fields'>{rows}</table>"


def local(moment: datetime | None, zone: ZoneInfo) -> str:
    return NOTHING if moment is None else wording.local(moment, zone)


def duration(seconds: timedelta | None) -> str:
    if seconds is None:
        return NOTHING
    total = int(seconds.total_seconds())
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


def page(title: str, body: str, *, who: str, logout: str | None) -> str:
    """``logout``: the session's CSRF token, for the sign-out button (None: no button)."""
    out = (
        "<form class='logout' method='post' action='/logout'>"
        f"<input type='hidden' name='csrf' value='{escape(logout)}'><button>sign out</button></form>"
        if logout is not None
        else ""
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{escape(title)} · pgsched</title><style>{STYLE}</style></head><body>"
        f"<header>{link('/', 'pgsched')}<span>{escape(title)}</span>"
        f"<span class='who'>{escape(who)} {out}</span></header>"
        f"<main>{body}</main></body></html>"
    )
