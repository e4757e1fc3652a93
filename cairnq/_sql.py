"""Loading the protocol: SQL statements and migrations shipped as data files.

``cairnq._protocol`` (the repository's ``protocol/`` directory) holds every
statement and migration, one statement per file, with ``:name`` parameters.
Nothing in Python writes SQL; it only picks a file, specializes optional
filters, and binds parameters (found by a lexer that knows strings and
comments: never inside one). ``CAIRNQ_PROTOCOL_DIR`` points elsewhere (a
checkout under test, say).

What the code must know about a statement beyond its text is written in the
file, on header lines ``-- cairnq: <key> <values...>`` (see ``ANNOTATIONS``),
and read here once; nothing else reads SQL text to learn its shape.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, NamedTuple

__all__ = [
    "Statement",
    "EchoColumn",
    "ANNOTATIONS",
    "AnnotationError",
    "read_annotations",
    "Migration",
    "find_protocol_root",
    "load_statements",
    "load_migrations",
    "strip_comments",
    "statement_params",
    "specialize",
    "split_params",
    "sql_tokens",
    "DIALECTS",
]

DIALECTS = ("sqlite", "postgres")

# A named parameter, not a ::cast (searched for in SQL code only, never
# inside a string, a quoted identifier or a comment).
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
# An optional equality filter: "(:p is null or col = :p)", with an optional
# ::type cast on the null test (Postgres needs it to type the parameter).
_FILTER = re.compile(
    r"\(\s*:(?P<p>\w+)(?:::[\w ]+?)?\s+is\s+null\s+or\s+(?P<col>[\w.]+)\s*=\s*:(?P=p)\s*\)",
    re.IGNORECASE,
)

# -- lexing ------------------------------------------------------------------------
#
# PostgreSQL's lexical rules for what is not SQL code (a superset of what the
# SQLite files use): '...' strings ('' doubles a quote; a backslash is plain
# text, as with standard_conforming_strings on, and no template has one),
# E'...' strings (backslash escapes too), "..." identifiers, $tag$...$tag$ strings, -- and
# (nested) /* */ comments. Statement templates are lexed once; nothing ever
# searches the inside of a string or a comment for parameters or comments.

CODE, QUOTED, LINE_COMMENT, BLOCK_COMMENT = "code", "quoted", "line_comment", "block_comment"

_NOT_CODE = re.compile(
    r"""(?P<estring>(?<![\w$])[eE]')|(?P<string>')|(?P<ident>")|(?P<line>--)|(?P<block>/\*)"""
    r"""|(?P<dollar>(?<![\w$])\$(?:[^\W\d]\w*)?\$)"""
)
_ENDS = {
    "estring": re.compile(r"[eE]'(?:[^'\\]|\\.|'')*'", re.DOTALL),
    "string": re.compile(r"'[^']*(?:''[^']*)*'"),
    "ident": re.compile(r'"[^"]*(?:""[^"]*)*"'),
    "line": re.compile(r"--[^\n\r]*"),
}
_BLOCK_MARK = re.compile(r"/\*|\*/")
_LINE_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")  # str.splitlines'


def _block_comment_end(sql: str, start: int) -> int:
    depth = 0
    for mark in _BLOCK_MARK.finditer(sql, start):
        depth += 1 if mark.group() == "/*" else -1
        if depth == 0:
            return mark.end()
    return len(sql)  # unterminated: the server reports it


def _quoted_end(sql: str, start: int, kind: str, opener: str) -> int:
    if kind == "block":
        return _block_comment_end(sql, start)
    if kind == "dollar":
        close = sql.find(opener, start + len(opener))
        return len(sql) if close < 0 else close + len(opener)
    found = _ENDS[kind].match(sql, start)
    return found.end() if found else len(sql)  # unterminated: the server reports it


@lru_cache(maxsize=1024)
def sql_tokens(sql: str) -> tuple[tuple[str, str], ...]:
    """``sql`` as (kind, text) pieces that join back to it: ``CODE``,
    ``QUOTED`` (strings and quoted identifiers), ``LINE_COMMENT`` (up to, not
    including, the line break) and ``BLOCK_COMMENT``."""
    out: list[tuple[str, str]] = []
    pos = 0
    while True:
        found = _NOT_CODE.search(sql, pos)
        if found is None:
            break
        start, kind = found.start(), found.lastgroup
        assert kind is not None
        end = _quoted_end(sql, start, kind, found.group())
        if start > pos:
            out.append((CODE, sql[pos:start]))
        label = {"line": LINE_COMMENT, "block": BLOCK_COMMENT}.get(kind, QUOTED)
        out.append((label, sql[start:end]))
        pos = end
    if pos < len(sql):
        out.append((CODE, sql[pos:]))
    return tuple(out)


def _code_sub(pattern: re.Pattern[str], repl: Any, sql: str) -> str:
    """``pattern.sub`` over the SQL code of ``sql`` only."""
    return "".join(pattern.sub(repl, text) if kind == CODE else text for kind, text in sql_tokens(sql))


@lru_cache(maxsize=1024)
def split_params(sql: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(chunks, slots): ``sql`` cut at each ``:name`` in its code, ``--``
    comments dropped. ``slots[i]`` (a parameter name) goes between
    ``chunks[i]`` and ``chunks[i + 1]``; one more chunk than slots."""
    chunks: list[str] = []
    slots: list[str] = []
    pending: list[str] = []
    for kind, text in sql_tokens(sql):
        if kind == LINE_COMMENT:
            continue
        if kind != CODE:
            pending.append(text)
            continue
        pos = 0
        for found in _PARAM.finditer(text):
            pending.append(text[pos : found.start()])
            chunks.append("".join(pending))
            pending = []
            slots.append(found.group(1))
            pos = found.end()
        pending.append(text[pos:])
    chunks.append("".join(pending))
    return tuple(chunks), tuple(slots)


def strip_comments(sql: str) -> str:
    """Drop ``--`` comments (not a ``--`` inside a string or a block comment),
    trailing blanks and blank lines."""
    lines: list[str] = []
    line: list[tuple[str, str]] = []
    for kind, text in sql_tokens(sql):
        if kind == LINE_COMMENT:
            continue
        if kind != CODE:
            line.append((kind, text))
            continue
        pieces = _LINE_BREAK.split(text)
        for piece in pieces[:-1]:
            line.append((CODE, piece))
            lines.append(_finish_line(line))
            line = []
        line.append((CODE, pieces[-1]))
    lines.append(_finish_line(line))
    return "\n".join(text for text in lines if text)


def _finish_line(line: list[tuple[str, str]]) -> str:
    """A line's text with its trailing blanks dropped ("" when blank); only
    code is trimmed, never the end of a string."""
    while line and line[-1][0] == CODE and not line[-1][1].rstrip():
        line.pop()
    if line and line[-1][0] == CODE:
        line[-1] = (CODE, line[-1][1].rstrip())
    return "".join(text for _, text in line)


def statement_params(sql: str) -> tuple[str, ...]:
    """The distinct ``:name`` parameters of a statement, in order of first
    appearance (in its code: not in strings or comments; ``::casts`` are not
    parameters): the order a positional driver binds them in."""
    return tuple(dict.fromkeys(split_params(sql)[1]))


def specialize(sql: str, params: Mapping[str, Any]) -> str:
    """Any statement's optional filters made plain equalities where given.

    "(:p is null or col = :p)" becomes "col = :p" when ``params[p]`` is not
    None; filters left None stay as written (OPERATIONS.md §9.2). The store's
    own statements go through ``Statement.specialize``, which caches the result
    per combination and also drops the unused ones.
    """

    def rewrite(m: re.Match[str]) -> str:
        return f"{m['col']} = :{m['p']}" if params.get(m["p"]) is not None else m.group(0)

    return _code_sub(_FILTER, rewrite, sql)


class EchoColumn(NamedTuple):
    """One column of an ``echo-row`` annotation: written from the bound
    parameter ``param``, or (``param`` None) the constant ``value``."""

    column: str
    param: str | None
    value: Any = None


@dataclass(frozen=True)
class Statement:
    """One protocol statement, ready to bind."""

    name: str
    text: str
    params: tuple[str, ...]
    is_read: bool
    # Optional filters, as (param, column) pairs, that specialize() rewrites per call.
    filters: tuple[tuple[str, str], ...] = ()
    # From the file's annotations (see ANNOTATIONS); not part of the identity
    # (nor of the hash that keys the specialize cache).
    echo_row: tuple[EchoColumn, ...] = field(default=(), compare=False)
    # ``fill-row``: the columns the statement sets to known values and leaves
    # out of its RETURNING list (``returning``, the columns it does return).
    fill_row: tuple[EchoColumn, ...] = field(default=(), compare=False)
    returning: tuple[str, ...] = field(default=(), compare=False)
    plan_per_value: tuple[str, ...] = field(default=(), compare=False)
    plan_custom: tuple[str, ...] = field(default=(), compare=False)

    def specialize(self, params: Mapping[str, Any]) -> str:
        """The text with each optional filter made an equality or dropped.

        "(:p is null or col = :p)" becomes "col = :p" when p is given, so the
        planner can use an index on col, and "true" when it is not.
        """
        if not self.filters:
            return self.text
        mask = tuple(params.get(p) is not None for p, _ in self.filters)
        return _specialized(self, mask)


@lru_cache(maxsize=256)
def _specialized(stmt: Statement, mask: tuple[bool, ...]) -> str:
    given = {p for (p, _), on in zip(stmt.filters, mask) if on}

    def rewrite(m: re.Match[str]) -> str:
        return f"{m['col']} = :{m['p']}" if m["p"] in given else "true"

    return _code_sub(_FILTER, rewrite, stmt.text)


# -- annotations ----------------------------------------------------------------------
#
# "-- cairnq: <key> <values...>" on a line of the file's leading comment block
# (before its first line of code). A long annotation may wrap: the same key on
# the next lines continues its values. An unknown key, a key of the other
# dialect, a value that names no parameter of the statement, or an
# annotation below the first line of code is an error when the statements are
# loaded: a file cannot lose its fast path silently.

#: Annotation key -> (the dialects it applies to, what it tells the code).
ANNOTATIONS: dict[str, tuple[tuple[str, ...], str]] = {
    "echo-row": (
        ("sqlite",),
        "The insert writes exactly these values, so the store rebuilds the new row from the "
        "bound parameters instead of asking for RETURNING (which costs SQLite more than the "
        "insert when writes are batched). One entry per column, in the insert's order: "
        "`column` (the parameter of that name), `column=:param`, or `column=<constant>` "
        "(null, an integer, or a 'text' without blanks).",
    ),
    "fill-row": (
        ("sqlite",),
        "The update sets these columns to values the store knows (its parameters, or "
        "constants) and leaves them out of its RETURNING list, which names the other columns: "
        "the store puts each returned row back together in table order, as `returning *` "
        "would give it, without SQLite copying the known values into every returned row. "
        "Entries as for `echo-row`; every column of cairnq_tasks is returned or named here.",
    ),
    "plan-per-value": (
        ("postgres",),
        "The best plan depends on how the backlog is spread over these parameters' values "
        "(queues, names): a generic plan cannot know that one name holds the whole backlog "
        "and another nothing. Their values are written into the text as literals (escaped, "
        "by slot: store/postgres/params.py), so each combination gets a prepared statement "
        "of its own, planned for those values.",
    ),
    "plan-custom": (
        ("postgres",),
        "The best plan depends on these parameters' values (a batch's ids), and a generic "
        "plan, made once with the table's size and statistics of that moment, would keep "
        "what suited them (a scan of a table that was tiny, say). The statement is sent "
        "unprepared, so each execution is planned with its own values: planning costs the "
        "server about 0.1 ms a statement, so only for statements that run once per batch.",
    ),
}
_ANNOTATION = re.compile(r"--\s*cairnq:\s*(?P<key>\S+)(?P<values>.*)")
_ECHO_ENTRY = re.compile(
    r"(?P<column>[A-Za-z_]\w*)"
    r"(?:=(?::(?P<param>[A-Za-z_]\w*)|(?P<null>null)|(?P<int>-?\d+)|'(?P<text>[^'\s]*)'))?",
    re.IGNORECASE,
)


class AnnotationError(ValueError):
    """A statement file's ``-- cairnq:`` annotations are wrong."""


def read_annotations(sql: str, where: str = "statement") -> dict[str, tuple[str, ...]]:
    """The ``-- cairnq:`` annotations of a statement file's header, as key ->
    values (wrapped lines joined). Raises AnnotationError for one below the
    first line of code."""
    found: dict[str, list[str]] = {}
    in_header = True
    for kind, text in sql_tokens(sql):
        if kind == CODE and text.strip():
            in_header = False
        elif kind == LINE_COMMENT:
            m = _ANNOTATION.fullmatch(text.rstrip())
            if m is None:
                continue
            if not in_header:
                raise AnnotationError(f"{where}: annotation below the first line of code: {text!r}")
            found.setdefault(m["key"], []).extend(m["values"].split())
        elif kind == QUOTED:
            in_header = False
    return {key: tuple(values) for key, values in found.items()}


def _annotated(stmt: Statement, raw: str, dialect: str) -> Statement:
    """``stmt`` with the annotations of its file ``raw``, checked."""
    where = f"{dialect}/{stmt.name}.sql"
    found = read_annotations(raw, where)
    for key, values in found.items():
        known = ANNOTATIONS.get(key)
        if known is None:
            raise AnnotationError(
                f"{where}: unknown annotation {key!r}; known: {sorted(ANNOTATIONS)}"
            )
        if dialect not in known[0]:
            raise AnnotationError(f"{where}: annotation {key!r} applies to {known[0]} only")
        if not values:
            raise AnnotationError(f"{where}: annotation {key!r} has no values")
    plan = found.get("plan-per-value", ())
    custom = found.get("plan-custom", ())
    echo = tuple(_echo_column(entry, where) for entry in found.get("echo-row", ()))
    fill = tuple(_echo_column(entry, where, "fill-row") for entry in found.get("fill-row", ()))
    returning = _returning_columns(stmt.text, where) if fill else ()
    named = [*plan, *custom, *(c.param for c in (*echo, *fill) if c.param is not None)]
    unknown = [p for p in named if p not in stmt.params]
    if unknown:
        raise AnnotationError(f"{where}: annotated {unknown} are not parameters of the statement")
    for values in (plan, custom, tuple(c.column for c in echo), (*returning, *(c.column for c in fill))):
        if len(set(values)) != len(values):
            raise AnnotationError(f"{where}: an annotation names the same thing twice: {values}")
    return replace(
        stmt, echo_row=echo, fill_row=fill, returning=returning, plan_per_value=plan, plan_custom=custom
    )


_RETURNING = re.compile(r"\breturning\s+(?P<columns>.+?)\s*;?\s*\Z", re.IGNORECASE | re.DOTALL)
_COLUMN = re.compile(r"[A-Za-z_]\w*")


def _returning_columns(text: str, where: str) -> tuple[str, ...]:
    """The columns of the statement's closing ``RETURNING`` list (plain
    column names only: a ``fill-row`` statement must name what it returns)."""
    code = "".join(piece for kind, piece in sql_tokens(strip_comments(text)) if kind == CODE)
    found = _RETURNING.search(code)
    columns = tuple(c.strip() for c in found["columns"].split(",")) if found else ()
    if not columns or not all(_COLUMN.fullmatch(c) for c in columns) or "*" in columns:
        raise AnnotationError(f"{where}: fill-row needs the statement to end with RETURNING <columns>")
    return columns


def _echo_column(entry: str, where: str, key: str = "echo-row") -> EchoColumn:
    m = _ECHO_ENTRY.fullmatch(entry)
    if m is None:
        raise AnnotationError(
            f"{where}: {key} entry {entry!r} is not column, column=:param or column=<constant>"
        )
    column = m["column"]
    if m["param"] is not None:
        return EchoColumn(column, m["param"])
    if m["null"] is not None:
        return EchoColumn(column, None, None)
    if m["int"] is not None:
        return EchoColumn(column, None, int(m["int"]))
    if m["text"] is not None:
        return EchoColumn(column, None, m["text"])
    return EchoColumn(column, column)


@dataclass(frozen=True)
class Migration:
    name: str  # the file name, ".sql" included: the ledger key
    script: str  # the whole file as written (Postgres runs it as one script)

    def statements(self) -> list[str]:
        """The script split into complete statements (SQLite runs them one by one)."""
        import sqlite3

        out: list[str] = []
        pending = ""
        for line in self.script.splitlines(keepends=True):
            pending += line
            if sqlite3.complete_statement(pending):
                stmt = strip_comments(pending).strip()
                if stmt:
                    out.append(stmt)
                pending = ""
        if strip_comments(pending).strip():
            raise ValueError(f"{self.name}: incomplete statement at end of file")
        return out


def _filters_in(sql: str) -> list[re.Match[str]]:
    return [m for kind, text in sql_tokens(sql) if kind == CODE for m in _FILTER.finditer(text)]


def find_protocol_root() -> Path:
    override = os.environ.get("CAIRNQ_PROTOCOL_DIR")
    if override:
        return Path(override)
    import importlib.util

    spec = importlib.util.find_spec("cairnq._protocol")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    # Running from a source tree whose protocol/ is not mapped into the package.
    return Path(__file__).resolve().parent.parent / "protocol"


def _check_dialect(dialect: str) -> None:
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {DIALECTS}")


@lru_cache(maxsize=None)
def _load_statements(root: Path, dialect: str) -> dict[str, Statement]:
    out: dict[str, Statement] = {}
    for path in sorted((root / "sql" / dialect).glob("*.sql")):
        raw = path.read_text(encoding="utf-8")
        text = strip_comments(raw)
        params = statement_params(text)
        filters = tuple(dict.fromkeys((m["p"], m["col"]) for m in _filters_in(text)))
        stmt = Statement(
            name=path.stem,
            text=text,
            params=params,
            is_read=text.lstrip().lower().startswith("select"),
            filters=filters,
        )
        out[path.stem] = _annotated(stmt, raw, dialect)
    if not out:
        raise FileNotFoundError(f"no {dialect} statements under {root / 'sql' / dialect}")
    return out


def load_statements(dialect: str = "sqlite", root: Path | None = None) -> dict[str, Statement]:
    _check_dialect(dialect)
    return _load_statements(root or find_protocol_root(), dialect)


@lru_cache(maxsize=None)
def _load_migrations(root: Path, dialect: str) -> tuple[Migration, ...]:
    paths = sorted((root / "migrations" / dialect).glob("*.sql"), key=lambda p: p.name)
    if not paths:
        raise FileNotFoundError(f"no {dialect} migrations under {root / 'migrations' / dialect}")
    return tuple(Migration(p.name, p.read_text(encoding="utf-8")) for p in paths)


def load_migrations(dialect: str = "sqlite", root: Path | None = None) -> tuple[Migration, ...]:
    _check_dialect(dialect)
    return _load_migrations(root or find_protocol_root(), dialect)
