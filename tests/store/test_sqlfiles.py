"""The loader of the stores' .sql files (service.store.sqlfiles): headers, includes with
arguments, comments dropped, parameters in each driver's form, and a defect in the files
(a missing name, a name twice, a fragment that includes itself) found at import."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.store.sqlfiles import DuplicateName, SqlFileError, UnknownStatement, folders, load, statements


def _files(tmp_path: Path, **texts: str) -> Path:
    for name, text in texts.items():
        (tmp_path / f"{name}.sql").write_text(text, encoding="utf-8")
    return tmp_path


def test_a_statement_includes_fragments_with_arguments_and_loses_its_comments(tmp_path: Path) -> None:
    folder = _files(
        tmp_path,
        area="""-- name: full_scopes
-- Scopes with no room: the purpose line is for the reader, not the database.
SELECT c.scope FROM scope_counters AS c
WHERE {{room(c)}} <= 0  -- a trailing comment goes too

-- fragment: room(x)
-- The room left, in words of the alias given.
{x}.concurrency - {{running(x)}}

-- fragment: running(y)
{y}.running
""",
    )
    loaded = load("sqlite", [folder])
    assert dict(loaded) == {
        "full_scopes": "\nSELECT c.scope FROM scope_counters AS c\nWHERE c.concurrency - c.running <= 0\n"
    }


def test_psycopg_gets_named_placeholders_and_doubled_percent_signs_but_casts_and_quotes_stay(tmp_path: Path) -> None:
    folder = _files(
        tmp_path,
        area="""-- name: shaped
SELECT :tenant::text, 'a:b %', scope LIKE 'tenant:%', :now
""",
    )
    assert (
        load("postgres", [folder])["shaped"] == "\nSELECT %(tenant)s::text, 'a:b %%', scope LIKE 'tenant:%%', %(now)s\n"
    )
    assert load("sqlite", [folder])["shaped"] == "\nSELECT :tenant::text, 'a:b %', scope LIKE 'tenant:%', :now\n"


def test_an_unknown_name_is_a_named_error(tmp_path: Path) -> None:
    loaded = load("sqlite", [_files(tmp_path, area="-- name: one\nSELECT 1\n")])
    with pytest.raises(UnknownStatement, match="no sqlite statement is named 'two'"):
        loaded["two"]
    with pytest.raises(UnknownStatement, match="no sqlite fragment is named 'missing'"):
        load("sqlite", [_files(tmp_path, area="-- name: one\nSELECT {{missing}}\n")])


def test_a_name_defined_twice_across_files_is_refused(tmp_path: Path) -> None:
    folder = _files(tmp_path, first="-- name: same\nSELECT 1\n", second="-- name: same\nSELECT 2\n")
    with pytest.raises(DuplicateName, match="'same' is defined in first.sql and in second.sql"):
        load("sqlite", [folder])


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1\n-- name: late\nSELECT 2\n",  # text before the first header
        "-- name: one\nSELECT {{loop}}\n-- fragment: loop\n{{loop}}\n",  # a fragment including itself
        "-- name: one\nSELECT {{pair(a)}}\n-- fragment: pair(x, y)\n{x} + {y}\n",  # an argument short
    ],
)
def test_malformed_files_are_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(SqlFileError):
        load("sqlite", [_files(tmp_path, area=text)])


@pytest.mark.parametrize("dialect", ["postgres", "sqlite"])
def test_every_include_of_the_stores_files_is_expanded(dialect: str) -> None:
    loaded = statements(dialect)  # type: ignore[arg-type]
    assert len(loaded) >= 60
    assert not [name for name, text in loaded.items() if "{{" in text or "{" + "x}" in text]


def test_every_statement_and_fragment_of_the_stores_says_its_purpose() -> None:
    """A ``-- name:`` or ``-- fragment:`` header is followed by its purpose comment."""
    silent = []
    for folder in {*folders("postgres"), *folders("sqlite")}:
        for path in sorted(folder.glob("*.sql")):
            lines = path.read_text(encoding="utf-8").splitlines()
            for header, following in zip(lines, [*lines[1:], ""], strict=True):
                if header.startswith(("-- name:", "-- fragment:")) and not following.startswith("-- "):
                    silent.append(f"{path.name}: {header}")
    assert not silent, "\n".join(silent)
