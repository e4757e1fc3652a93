"""Named parameters to PostgreSQL's positional ``$n``."""

from __future__ import annotations

import re
from typing import Any, Mapping

__all__ = ["positional_statement", "to_positional"]

_COMMENT = re.compile(r"--[^\n]*")
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def positional_statement(sql: str) -> tuple[str, tuple[str, ...]]:
    """``:name`` -> ``$k``, numbered by first appearance; a name used twice
    takes one slot. ``::casts`` are left alone. Returns (text, names)."""
    names: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        index = names.setdefault(m.group(1), len(names) + 1)
        return f"${index}"

    text = _NAMED.sub(number, _COMMENT.sub("", sql))
    return text, tuple(names)


def to_positional(sql: str, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
    text, names = positional_statement(sql)
    return text, [params[n] for n in names]
