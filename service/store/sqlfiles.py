"""The stores' SQL, read from ``.sql`` files once, at import.

Where the files are (one file per area module, named like it)::

    service/store/sql/*.sql             dialect-neutral: written once, loaded for both stores
    service/store/postgres/sql/*.sql    PostgreSQL only
    service/store/sqlite/sql/*.sql      SQLite only

What a file holds: statements and fragments, each under a header line, its purpose
(the invariant it keeps) in the ``--`` comment lines that follow::

    -- name: claim_jobs          a statement: STATEMENTS["claim_jobs"]
    -- fragment: room(c)         a piece that statements include, with its arguments

A statement or a fragment includes a fragment with ``{{room(s)}}`` (or ``{{now}}``); in a
fragment, ``{c}`` is its argument ``c``, and ``{{window(c)}}`` passes it on. Includes are expanded here, once, so the text the
database receives is whole (tests/store/golden/ keeps the hot path's). A name is unique
among a dialect's files (neutral and its own): a fragment both dialects need, each in its
own words (``now``), is written once in each dialect's files and nowhere neutral.

Parameters are written ``:name`` in every file. For psycopg the loader writes them
``%(name)s`` and doubles every other ``%``; ``::`` casts and text in quotes are left alone.

Comments are not sent: ``--`` comments and the blank lines they leave are dropped when a
statement is loaded. They are the reader's, in the file; the database plans the same text
without them, and a shorter text keeps psycopg's parse cache (statements under 4,096
bytes) for more of the hot path.

A missing or repeated name is a defect found at import: :class:`UnknownStatement`,
:class:`DuplicateName` (both :class:`SqlFileError`; outside the service's exception tree,
since no request or job can cause one).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

Dialect = Literal["postgres", "sqlite"]

_STORE = Path(__file__).resolve().parent
_HEADER = re.compile(r"^-- (name|fragment): *(\w+)(?:\(([\w, ]*)\))? *$", re.MULTILINE)
_INCLUDE = re.compile(r"\{\{ *(\w+)(?:\(([\w., ]*)\))? *\}\}")
# One token of SQL as psycopg's conversion meets it: text in quotes (only its % doubled), a
# comment (dropped), a cast (left alone), a parameter, a percent sign.
_TOKEN = re.compile(r"'(?:[^']|'')*'|\"[^\"]*\"|--[^\n]*|::|:([A-Za-z_]\w*)|%")


class SqlFileError(Exception):
    """The SQL files are inconsistent with each other or with the code that names them."""


class UnknownStatement(SqlFileError, KeyError):
    """A statement or a fragment is named that no file of the dialect defines."""


class DuplicateName(SqlFileError):
    """Two definitions under one name in one dialect's files."""


@dataclass(frozen=True)
class _Definition:
    name: str
    is_fragment: bool
    arguments: tuple[str, ...]
    text: str
    source: Path


class Statements(Mapping[str, str]):
    """One dialect's statements by name, includes expanded, comments dropped, parameters
    in the driver's form. A missing name raises UnknownStatement."""

    def __init__(self, dialect: Dialect, statements: dict[str, str]) -> None:
        self.dialect = dialect
        self._statements = statements

    def __getitem__(self, name: str) -> str:
        try:
            return self._statements[name]
        except KeyError:
            raise UnknownStatement(f"no {self.dialect} statement is named {name!r} in the SQL files") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._statements)

    def __len__(self) -> int:
        return len(self._statements)


def folders(dialect: Dialect) -> tuple[Path, Path]:
    """The folders a dialect's SQL is read from: the neutral one, then its own."""
    return _STORE / "sql", _STORE / dialect / "sql"


@cache
def statements(dialect: Dialect) -> Statements:
    """Every statement of ``dialect``, read once per process."""
    return load(dialect, folders(dialect))


def load(dialect: Dialect, paths: Sequence[Path]) -> Statements:
    """The statements of the ``.sql`` files in ``paths`` (folders), for ``dialect``."""
    definitions: dict[str, _Definition] = {}
    for folder in paths:
        for path in sorted(folder.glob("*.sql")):
            for definition in _definitions(path):
                earlier = definitions.setdefault(definition.name, definition)
                if earlier is not definition:
                    raise DuplicateName(
                        f"{definition.name!r} is defined in {earlier.source.name} and in {definition.source.name}"
                    )
    texts = {
        name: _finished(_expand(d.text, definitions, dialect, (name,), {}), dialect)
        for name, d in definitions.items()
        if not d.is_fragment
    }
    return Statements(dialect, texts)


def _definitions(path: Path) -> Iterator[_Definition]:
    text = path.read_text(encoding="utf-8")
    headers = list(_HEADER.finditer(text))
    if not headers or text[: headers[0].start()].strip(" \n-"):
        raise SqlFileError(f"{path}: text before the first '-- name:' or '-- fragment:' header")
    for header, following in zip(headers, [*headers[1:], None], strict=True):
        kind, name, arguments = header.groups()
        if kind == "name" and arguments is not None:
            raise SqlFileError(f"{path}: the statement {name!r} takes no arguments (a fragment does)")
        body = text[header.end() : following.start() if following else len(text)]
        yield _Definition(
            name=name,
            is_fragment=kind == "fragment",
            arguments=tuple(a.strip() for a in (arguments or "").split(",") if a.strip()),
            text=body,
            source=path,
        )


def _expand(
    text: str,
    definitions: Mapping[str, _Definition],
    dialect: Dialect,
    path: tuple[str, ...],
    bindings: Mapping[str, str],
) -> str:
    """``text`` with every ``{{fragment(args)}}`` replaced by the fragment's text, its
    arguments put in; fragments may include fragments (passing on their own arguments by
    name: ``{{window(c)}}`` inside ``room(c)``), never themselves."""

    def include(match: re.Match[str]) -> str:
        name, given = match.group(1), match.group(2)
        fragment = definitions.get(name)
        if fragment is None or not fragment.is_fragment:
            raise UnknownStatement(f"{path[0]}: no {dialect} fragment is named {name!r}")
        if name in path:
            raise SqlFileError(f"the fragment {name!r} includes itself: {' -> '.join(path)}")
        values = tuple(bindings.get(a.strip(), a.strip()) for a in (given or "").split(",") if a.strip())
        if len(values) != len(fragment.arguments):
            raise SqlFileError(f"{path[0]}: {name} takes {fragment.arguments}, given {values}")
        body = _strip_comments(fragment.text).strip()
        for argument, value in zip(fragment.arguments, values, strict=True):
            body = body.replace("{" + argument + "}", value)
        return _expand(body, definitions, dialect, (*path, name), dict(zip(fragment.arguments, values, strict=True)))

    return _INCLUDE.sub(include, text)


def _strip_comments(text: str) -> str:
    """The SQL without its ``--`` comments and the lines they leave blank."""
    kept = _TOKEN.sub(lambda m: "" if m.group(0).startswith("--") else m.group(0), text)
    return "\n".join(line.rstrip() for line in kept.splitlines() if line.strip())


def _finished(text: str, dialect: Dialect) -> str:
    """The text the driver is given: comments dropped; for psycopg, ``%(name)s``."""
    text = "\n" + _strip_comments(text) + "\n"
    if dialect == "sqlite":
        return text

    def psycopg_form(match: re.Match[str]) -> str:
        token = match.group(0)
        if match.group(1) is not None:
            return f"%({match.group(1)})s"
        return token.replace("%", "%%") if token.startswith(("%", "'")) else token

    return _TOKEN.sub(psycopg_form, text)
