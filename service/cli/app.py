"""The ``jobq`` command: thin, calls the layers below, never writes SQL.

The commands live in the modules of this package, one module per area (jobs,
processes, operations, tokens); each is a small ``@app.command()`` function that
takes ``ctx`` and uses :func:`open_cli_store`. This module holds the app, the
global options, the shared parsing and :func:`main`.

Output: results on stdout (``enqueue`` prints only the id, so scripts can
capture it), everything else on stderr. An error is one line, ``error: ...``,
on stderr, with no traceback, and one of these exit codes (:func:`exit_code`
is the one place that maps the exception tree of :mod:`service.errors`):

    0  success
    1  the command ran but cannot do it: no such job, the job's state forbids it,
       an idempotency key reused for a different job
    2  usage or input error (bad option, invalid JSON, malformed id, bad setting):
       rejected before anything was written
    3  the database is unreachable, or its schema is not migrated: retry later,
       or run ``jobq migrate``
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

import pydantic
import typer
import typer.core

from service.config import Settings, load_settings
from service.errors import InvalidInput, JobqError, StoreUnavailable
from service.store import Store, open_store

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3

app = typer.Typer(
    name="jobq",
    help="jobq: a job queue for long-running work, stored in PostgreSQL or SQLite.",
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: rich's panels print a type beside every option (`--json <bool>`).
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


# -- plumbing ------------------------------------------------------------------------


@dataclasses.dataclass
class CliState:
    """What the global options leave for the commands. Settings are read lazily,
    so ``--help`` works whatever the environment holds."""

    database_url: str | None = None

    def settings(self) -> Settings:
        overrides: dict[str, object] = {}
        if self.database_url is not None:
            overrides["database_url"] = self.database_url
        try:
            return load_settings(**overrides)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or "settings"
            raise InvalidInput(f"invalid setting JOBQ_{field.upper()}: {first['msg']}") from exc


def _print_version(value: bool) -> None:
    """Eager: runs while the options are parsed, before click asks for a command."""
    if value:
        from importlib.metadata import version as installed_version

        print(f"jobq {installed_version('jobq')}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _global_options(
    ctx: typer.Context,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            metavar="URL",
            help="postgresql://… or sqlite:///path; overrides JOBQ_DATABASE_URL (default sqlite:///./jobq.db).",
            show_default=False,
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print jobq's version and exit."),
    ] = False,
) -> None:
    ctx.obj = CliState(database_url=database_url)


def cli_state(ctx: typer.Context) -> CliState:
    state = ctx.find_object(CliState)
    if state is None:  # a command invoked without the group (tests that call it directly)
        state = CliState()
    return state


@contextmanager
def open_cli_store(ctx: typer.Context) -> Iterator[Store]:
    """The store for the settings in effect, closed when the command ends."""
    store = open_store(cli_state(ctx).settings())
    try:
        yield store
    finally:
        store.close()


def exit_code(exc: JobqError) -> int:
    """The exit code for each branch of the exception tree (see the module docstring)."""
    if isinstance(exc, InvalidInput):
        return EXIT_USAGE
    if isinstance(exc, StoreUnavailable):
        return EXIT_UNAVAILABLE
    # NotFound, InvalidTransition, IdempotencyConflict and the rest: the command ran, the answer is no.
    return EXIT_FAILED


def fail(message: str, code: int) -> None:
    """One line on stderr; never a traceback."""
    first_line = message.strip().splitlines()[0] if message.strip() else "unknown error"
    print(f"error: {first_line}", file=sys.stderr)
    raise SystemExit(code)


def parse_job_id(text: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise InvalidInput(f"not a job id (expected a UUID): {text!r}") from None


def read_payload_text(text: str) -> str:
    """``--payload``'s text: the argument itself, ``@path`` for a file's contents, ``-`` for stdin
    (a payload of megabytes does not fit an argument list)."""
    if text == "-":
        return sys.stdin.read()
    if text.startswith("@"):
        path = text[1:]
        try:
            with open(path, encoding="utf-8") as file:
                return file.read()
        except OSError as exc:
            raise InvalidInput(f"--payload {text}: cannot read {path!r}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise InvalidInput(f"--payload {text}: {path!r} is not UTF-8 text") from None
    return text


def parse_payload(text: str) -> dict[str, Any]:
    """``--payload`` (see :func:`read_payload_text`) as a JSON object."""
    text = read_payload_text(text)

    def reject_constant(name: str) -> None:
        raise InvalidInput(f"--payload is not valid JSON: {name} is not allowed")

    try:
        value = json.loads(text, parse_constant=reject_constant)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"--payload is not valid JSON: {exc}") from None
    except RecursionError:
        raise InvalidInput("--payload is nested too deeply to read as JSON: flatten it") from None
    if not isinstance(value, dict):
        raise InvalidInput(f"--payload must be a JSON object, not {type(value).__name__}")
    return value


def iso(moment: datetime | None) -> str | None:
    """ISO-8601 in UTC, spelled as pydantic (and so the API) spells it."""
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    credentials, _, host = rest.partition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}@{host}" if ":" in credentials else url


JobIdArgument = Annotated[str, typer.Argument(metavar="JOB_ID", help="The id `jobq enqueue` printed.")]
"""The JOB_ID argument of every command that names one job."""

# click's exception classes, from whichever click typer runs on (typer >= 0.2x vendors its own).
_click_exceptions = importlib.import_module(typer.BadParameter.__module__)


def _returning(value: str | None) -> Callable[..., Any]:
    """A stand-in for one of typer's display methods that answers ``value`` whatever it is asked."""
    return lambda *args, **kwargs: value


def _plain_help(command: Any) -> None:
    """Help as click spells it: ``KIND`` and ``--port PORT``, not typer's ``{KIND}``,
    ``KIND <str>`` and ``--port <int range>``. The type is noise; the help line says what to give."""
    for param in getattr(command, "params", []):
        metavar = param.metavar or (param.name or "value").upper()
        if isinstance(param, typer.core.TyperArgument):
            param.display_type_rich = _returning(None)  # type: ignore[method-assign]
            param._usage_display_name = _returning(metavar)  # type: ignore[method-assign]
        elif isinstance(param, typer.core.TyperOption):
            param.display_type_rich = _returning(metavar)  # type: ignore[method-assign]
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)


def cli_command() -> Any:
    """The click command behind ``jobq``, its help made plain (see :func:`_plain_help`)."""
    command = typer.main.get_command(app)
    _plain_help(command)
    return command


def main(argv: list[str] | None = None) -> None:
    """The ``jobq`` console script. Exits with the codes in the module docstring."""
    args = sys.argv[1:] if argv is None else list(argv)
    # The pool logs a warning per failed connection attempt; the one-line error says it once.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    command = cli_command()
    try:
        result = command.main(args=args or ["--help"], prog_name="jobq", standalone_mode=False)
    except _click_exceptions.ClickException as exc:
        fail(exc.format_message(), exc.exit_code)
    except typer.Abort:
        fail("aborted", EXIT_FAILED)
    except JobqError as exc:
        fail(str(exc), exit_code(exc))
    except BrokenPipeError:
        sys.stderr.close()  # the reader went away (`jobq status … | head -1`): nothing more to say
        raise SystemExit(EXIT_FAILED) from None
    if not args:
        raise SystemExit(EXIT_USAGE)  # the help was shown; no command was run
    raise SystemExit(result if isinstance(result, int) else EXIT_OK)
