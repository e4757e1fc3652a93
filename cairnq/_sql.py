"""Loading the protocol: SQL statements and migrations shipped as data files.

``cairnq._protocol`` (the repository's ``protocol/`` directory) holds every
statement and migration, one statement per file, with ``:name`` parameters.
Nothing in Python writes SQL; it only picks a file, specializes optional
filters, and binds parameters. ``CAIRNQ_PROTOCOL_DIR`` points elsewhere (a
checkout under test, say).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

__all__ = [
    "Statement",
    "Migration",
    "find_protocol_root",
    "load_statements",
    "load_migrations",
    "strip_comments",
    "statement_params",
    "specialize",
    "DIALECTS",
]

DIALECTS = ("sqlite", "postgres")

_COMMENT = re.compile(r"--[^\n]*")
# A named parameter, not a ::cast.
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
# An optional equality filter: "(:p is null or col = :p)", with an optional
# ::type cast on the null test (Postgres needs it to type the parameter).
_FILTER = re.compile(
    r"\(\s*:(?P<p>\w+)(?:::[\w ]+?)?\s+is\s+null\s+or\s+(?P<col>[\w.]+)\s*=\s*:(?P=p)\s*\)",
    re.IGNORECASE,
)


def strip_comments(sql: str) -> str:
    """Drop ``--`` comments and blank lines (no statement here quotes ``--``)."""
    lines = (_COMMENT.sub("", line).rstrip() for line in sql.splitlines())
    return "\n".join(line for line in lines if line.strip())


def statement_params(sql: str) -> tuple[str, ...]:
    """The distinct ``:name`` parameters of a statement, in order of first
    appearance (comments ignored, ``::casts`` are not parameters): the order a
    positional driver binds them in."""
    return tuple(dict.fromkeys(_PARAM.findall(strip_comments(sql))))


def specialize(sql: str, params: Mapping[str, Any]) -> str:
    """Any statement's optional filters made plain equalities where given.

    "(:p is null or col = :p)" becomes "col = :p" when ``params[p]`` is not
    None; filters left None stay as written (OPERATIONS.md §9.2). The store's
    own statements go through ``Statement.specialize``, which caches the result
    per combination and also drops the unused ones.
    """

    def rewrite(m: re.Match[str]) -> str:
        return f"{m['col']} = :{m['p']}" if params.get(m["p"]) is not None else m.group(0)

    return _FILTER.sub(rewrite, sql)


@dataclass(frozen=True)
class Statement:
    """One protocol statement, ready to bind."""

    name: str
    text: str
    params: tuple[str, ...]
    is_read: bool
    # Optional filters, as (param, column) pairs, that specialize() rewrites per call.
    filters: tuple[tuple[str, str], ...] = ()

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

    return _FILTER.sub(rewrite, stmt.text)


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
        text = strip_comments(path.read_text(encoding="utf-8"))
        params = statement_params(text)
        filters = tuple(dict.fromkeys((m["p"], m["col"]) for m in _FILTER.finditer(text)))
        out[path.stem] = Statement(
            name=path.stem,
            text=text,
            params=params,
            is_read=text.lstrip().lower().startswith("select"),
            filters=filters,
        )
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
