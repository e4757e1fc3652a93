"""Named parameters to PostgreSQL's positional ``$n``, and values written
into a statement as literals.

A statement is cut at its ``:name`` parameters once (``cairnq._sql``'s
lexer: never inside a string, an identifier or a comment). Binding fills
each slot with ``$k`` or with a literal and joins the pieces; the result is
never searched again, so no value can add a parameter, a comment or a quote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping, Optional

from cairnq._sql import split_params

__all__ = ["Template", "compile_template", "positional_statement", "to_positional", "text_literal"]

# What a text literal may hold: no NUL (the protocol ends the statement
# there), no lone surrogate (no encoding has one); short enough to be worth a
# plan of its own.
_LITERAL_TEXT = re.compile(r"[^\x00\ud800-\udfff]{1,200}")
MAX_LITERAL_ITEMS = 16


@dataclass(frozen=True)
class Template:
    """A statement cut at its parameters: ``slots[i]`` sits between
    ``chunks[i]`` and ``chunks[i + 1]``."""

    chunks: tuple[str, ...]
    slots: tuple[str, ...]

    def bind(self, literals: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
        """(text, names): each slot written as its literal from ``literals``,
        the rest as ``$k`` numbered by first appearance (a name used twice
        takes one number); ``names`` is the order to pass their values in."""
        numbers: dict[str, int] = {}
        out = [self.chunks[0]]
        for name, chunk in zip(self.slots, self.chunks[1:]):
            literal = literals.get(name)
            if literal is None:
                literal = f"${numbers.setdefault(name, len(numbers) + 1)}"
            out.append(literal)
            out.append(chunk)
        return "".join(out), tuple(numbers)


@lru_cache(maxsize=1024)
def compile_template(sql: str) -> Template:
    chunks, slots = split_params(sql)
    return Template(chunks, slots)


@lru_cache(maxsize=1024)
def positional_statement(sql: str) -> tuple[str, tuple[str, ...]]:
    """``:name`` -> ``$k``, numbered by first appearance; a name used twice
    takes one slot. ``::casts``, strings, quoted identifiers and comments are
    left alone (``--`` comments are dropped). Returns (text, names)."""
    return compile_template(sql).bind({})


def to_positional(sql: str, params: Mapping[str, Any]) -> tuple[str, list[Any]]:
    text, names = positional_statement(sql)
    return text, [params[n] for n in names]


def text_literal(value: str) -> str:
    """``value`` as a SQL string constant that reads back as exactly
    ``value`` whatever ``standard_conforming_strings`` says: an E'...'
    string, where a backslash is always an escape, so both the backslash
    and the quote are escaped (the quote by doubling, which every
    ``backslash_quote`` setting accepts). ``value`` must hold no NUL."""
    return "E'" + value.replace("\\", "\\\\").replace("'", "''") + "'"


_BIGINT_MIN, _BIGINT_MAX = -(2**63), 2**63 - 1


def selective_literal(value: Any) -> Optional[str]:
    """A typed literal for a queue or name value (text, or a short list of
    text), or a position such as a page cursor (an int), or None when it
    must stay a parameter."""
    if type(value) is int:  # not bool; the digits (and sign) are the whole literal
        # Parenthesised: a cast binds tighter than unary minus, and
        # 9223372036854775808::bigint overflows before it is negated.
        return f"({value})::bigint" if _BIGINT_MIN <= value <= _BIGINT_MAX else None
    if isinstance(value, str):
        return text_literal(value) + "::text" if _LITERAL_TEXT.fullmatch(value) else None
    if isinstance(value, (list, tuple)) and len(value) <= MAX_LITERAL_ITEMS:
        items = []
        for item in value:
            if not (isinstance(item, str) and _LITERAL_TEXT.fullmatch(item)):
                return None
            items.append(text_literal(item))
        return "array[" + ", ".join(items) + "]::text[]"
    return None
