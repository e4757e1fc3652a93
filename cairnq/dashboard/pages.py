"""What each page shows, as plain values for its template: the overview's
table and chart, the list's filter form and columns, a task's fields.
No HTTP here and no HTML: routes.py serves, templates/ draws."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from cairnq.dashboard import chart as charts
from cairnq.dashboard.queries import (
    DEFAULT_PAGE_SIZE,
    PAGE_SIZES,
    SORT_LABELS,
    SORTS,
    FilterError,
    Overview,
)
from cairnq.dashboard.render import Shown, shown_json, shown_text
from cairnq.models import STATUSES, TERMINAL, Task

__all__ = [
    "FLASHES",
    "FILTER_FIELDS",
    "flash",
    "list_options",
    "overview_context",
    "task_context",
    "JSON_PARTS",
    "part_value",
]

# Flash codes a redirect may carry (?flash=<code>); the text is ours, never the URL's.
FLASHES: dict[str, tuple[str, str]] = {
    "canceled": ("ok", "The task was canceled."),
    "cancel_requested": (
        "ok",
        "Cancel requested: the worker running the task stops it and it ends as canceled.",
    ),
    "cancel_refused": ("warn", "Not canceled: the task has finished already or does not exist."),
    "retried": ("ok", "The task was queued again."),
    "retry_refused": (
        "warn",
        "Not retried: only failed or canceled tasks can be retried (or it does not exist).",
    ),
    "purged": ("ok", "Deleted {n} finished task(s)."),
    "logged_out": ("ok", "Logged out."),
}

# The list's text filters, in the form's order, with their labels.
FILTER_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("queue", "Queue", ""),
    ("name", "Name", ""),
    ("key", "Key", ""),
    ("correlation_id", "Correlation id", ""),
    ("root_id", "Root id", "task_..."),
    ("created_from", "Created from", "2026-12-01T10:00 (UTC)"),
    ("created_to", "Created before", "2026-12-01T11:00 (UTC)"),
)


def flash(query: Mapping[str, str]) -> Optional[dict[str, str]]:
    entry = FLASHES.get(query.get("flash", ""))
    if entry is None:
        return None
    kind, text = entry
    n = query.get("n", "0")
    return {"kind": kind, "text": text.format(n=int(n) if n.isdigit() else 0)}


def list_options(query: Mapping[str, str]) -> tuple[str, int, Optional[str]]:
    """Sort, page size and cursor from the list's query string."""
    sort = query.get("sort") or "newest"
    if sort not in SORTS:
        raise FilterError(f"sort must be one of {', '.join(SORTS)}; got {sort!r}")
    text = query.get("limit") or str(DEFAULT_PAGE_SIZE)
    if not text.isdigit() or int(text) not in PAGE_SIZES:
        raise FilterError(f"limit must be one of {', '.join(map(str, PAGE_SIZES))}")
    return sort, int(text), query.get("cursor") or None


def list_form(query: Mapping[str, str]) -> dict[str, Any]:
    """The filter form as the user left it (the raw text, to correct a mistake)."""
    return {
        "text": {name: query.get(name, "") for name, _, _ in FILTER_FIELDS},
        "status": query.get("status", ""),
        "sort": query.get("sort", "newest"),
        "limit": query.get("limit", str(DEFAULT_PAGE_SIZE)),
        "fields": FILTER_FIELDS,
        "statuses": STATUSES,
        "sorts": SORT_LABELS,
        "page_sizes": PAGE_SIZES,
    }


def overview_context(ov: Overview) -> dict[str, Any]:
    return {"ov": ov, "chart": charts.chart(ov.throughput), "statuses": STATUSES}


JSON_PARTS = ("payload", "result", "metadata", "error")


def part_value(task: Task, part: str) -> Any:
    return getattr(task, part)


@dataclass(frozen=True)
class ErrorField:
    name: str
    shown: Shown
    multiline: bool


def _error_fields(error: Any) -> list[ErrorField]:
    """The error envelope's fields: type, message and retryable first, then
    the rest as the envelope has them (text as is, other values as JSON)."""
    if not isinstance(error, dict):
        return [ErrorField("value", shown_json(error), True)]
    order = ["type", "message", "retryable"]
    names = [n for n in order if n in error] + [n for n in error if n not in order]
    fields = []
    for name in names:
        value = error[name]
        shown = shown_text(value) if isinstance(value, str) else shown_json(value)
        multiline = "\n" in shown.text or len(shown.text) > 120
        fields.append(ErrorField(str(name), shown, multiline))
    return fields


def task_context(task: Task, key: Optional[str], read_only: bool) -> dict[str, Any]:
    parts: dict[str, Shown] = {p: shown_json(part_value(task, p)) for p in JSON_PARTS}
    timestamps = [
        ("created", "Created", task.created_at_ms),
        ("updated", "Updated", task.updated_at_ms),
        ("run_at", "Run at", task.run_at_ms),
        ("completed", "Completed", task.completed_at_ms),
        ("lease_until", "Lease until", task.lease_until_ms),
        ("cancel_requested", "Cancel requested", task.cancel_requested_at_ms),
    ]
    return {
        "task": task,
        "key": key,
        "parts": parts,
        "error_fields": _error_fields(task.error) if task.error is not None else [],
        "timestamps": timestamps,
        "can_cancel": not read_only and task.status in ("queued", "running"),
        "can_retry": not read_only and task.status in ("failed", "canceled"),
        "terminal": task.status in TERMINAL,
    }
