"""Batch heartbeat marshalling, pure Python. Twin of ``beats_c.pyx``.

A beat sends every live lease id in one statement (a JSON array for SQLite's
json_each) and reads back ``(id, cancel_requested_at_ms)`` for the rows it
renewed: presence means "still ours", the column means "cancel requested".
"""

from __future__ import annotations

from typing import Any, Iterable

from cairnq._speedups.jsoncodec import dumps


def encode_ids(ids: Iterable[str]) -> str:
    """A JSON array of strings."""
    return dumps(list(ids))


def decode_beats(rows: Iterable[Any]) -> dict[str, bool]:
    """``{task_id: cancel_requested}`` for the renewed rows."""
    return {row[0]: row[1] is not None for row in rows}
