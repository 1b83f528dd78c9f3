"""What a job may hold: text and JSON both databases can store and every reader can show,
and the bounds of its numbers, names, keys and sizes.

One home for these rules. The stores apply them before writing anything, and every way in
goes through a store's enqueue (the API's route, fast entrance and batch, ``jobq enqueue``,
``Queue``, the scheduler, a handler's ``ctx.enqueue`` with its result); the worker applies
them before handing a result or checkpoint on, and the API's request models call the same
functions, so a value is refused alike wherever it comes in (the API's models turn the
InvalidInput raised here into their 422s; InvalidInput is a ValueError, which is what
pydantic collects). No I/O here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from service.errors import InvalidInput, PayloadTooLarge, ResultTooLarge
from service.jobs import ADMIN_TENANT, JSON, MAX_PAGE_SIZE, ItemOutcome, ItemState, NewJob

MAX_NAME_LENGTH = 200
"""kind, queue, tenant, a schedule's name: one bound, which the API's schemas and every check import."""
MAX_KEY_LENGTH = 255
"""Idempotency and concurrency keys (the Idempotency-Key header's bound too)."""
IDEMPOTENCY_KEY_PATTERN = r"^[!-~]+$"
"""An idempotency key's alphabet: visible ASCII, no space (what an HTTP header carries byte for
byte, and what an RFC 8941 string holds, less the space a parser may trim). The API's header and
a batch's body, the CLI and the library then name one key with the same bytes."""
MAX_PRIORITY = 1_000
MAX_ATTEMPTS_LIMIT = 100
MAX_TOTAL = 2_147_483_647
"""Items a job may count (done and total): a PostgreSQL integer."""
MAX_DELAY_SECONDS = 366 * 86_400
MAX_JSON_DEPTH = 64
"""How deeply a stored JSON value (a payload, a result, a checkpoint, an item's result) may
nest objects and arrays: ``{}`` is 1, ``{"a": [1]}`` is 2. Every reader walks a value by
recursion, several Python frames a level on top of the frames already below it: Jinja's
``tojson`` (the console's job page), ``json.dumps(indent=2)`` (``jobq result``), ``json.loads``
in the client and the drivers, pydantic; and Python stops at 1,000 frames. Before this bound
the API took 972 levels and the console's job page failed from 943. 64 leaves each reader more
than ten times the stack it needs at that depth, and no job's input comes near it (a payload
is a record, not a tree); a deeper value is refused alike on every path, before anything is
written."""
DEFAULT_MAX_PAYLOAD_BYTES = 1_048_576
"""A payload's bound (JOBQ_MAX_BODY_BYTES) unless configured: compact JSON text as stored."""
SUBMIT_ENVELOPE_BYTES = 65_536
"""What a single submit's body may hold beyond its payload's bound (its kind, queue, keys,
parents): so a payload the store takes, sent as compact JSON, also fits through the body cap
of POST /v1/jobs, and the API refuses no payload that the CLI and the library accept."""
DEFAULT_MAX_RESULT_BYTES = 16 * 1_048_576
"""A result's bound (JOBQ_MAX_RESULT_BYTES) unless configured: room for a model's text output,
not for its artefacts (those go to object storage; the result holds their reference)."""
MAX_LEASE_SECONDS = 86_400

# Built once: json.dumps with any option builds a new encoder per call, which costs
# more than encoding a small value. ASCII only, so every character outside printable
# ASCII, a NUL and a lone surrogate among them, comes out as a ``\uXXXX`` escape: JSON
# text without ``\u`` holds no string that storable_json would refuse (see dump_batch).
_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=True)


def is_int(value: object) -> bool:
    """An int that is not a bool (True is an int to Python, not to a schema)."""
    return isinstance(value, int) and not isinstance(value, bool)


def storable_text(value: str, what: str = "text") -> str:
    """Text both databases can hold: PostgreSQL refuses NUL and lone surrogates, so both stores do."""
    if "\x00" in value:
        raise InvalidInput(f"{what} must not contain the NUL character (\\u0000)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} must be valid Unicode (it holds a lone surrogate)") from None
    return value


def storable_json(value: JSON, what: str) -> JSON:
    """Every string in a JSON value, keys too, is storable text, no number is NaN or infinite
    (Python's json module reads and writes them; JSON has none), and objects and arrays nest at
    most MAX_JSON_DEPTH deep. Walked a level at a time without recursion, so a value nested
    deeper than any reader could take is refused, not a stack overflow."""
    level: list[Any] = [value]
    depth = 0
    while level:
        below: list[Any] = []
        nested = False
        for item in level:
            if isinstance(item, str):
                storable_text(item, what)
            elif isinstance(item, dict):
                nested = True
                below.extend(item.keys())
                below.extend(item.values())
            elif isinstance(item, list | tuple):
                nested = True
                below.extend(item)
            elif isinstance(item, float) and not math.isfinite(item):
                raise InvalidInput(f"{what} is not JSON-serialisable: it holds NaN or Infinity, which JSON has not")
        if nested:
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise InvalidInput(
                    f"{what} is nested more than {MAX_JSON_DEPTH} objects and arrays deep, "
                    "more than every reader can show: flatten it"
                )
        level = below
    return value


def _needs_walk(text: str, shallow: int) -> bool:
    """Could JSON text hold what storable_json refuses (the text is ASCII: see _COMPACT)? Only
    with escaped text (``\\u``), or with as many opening brackets as MAX_JSON_DEPTH besides the
    ``shallow`` ones known to sit at the top (a value's own, a batch's list and rows): two scans
    in C, where the walk would visit every value. Nesting past the bound needs that many."""
    return "\\u" in text or text.count("{") + text.count("[") - shallow >= MAX_JSON_DEPTH


def _tops(values: Sequence[JSON]) -> int:
    """How many of ``values`` are objects or arrays: their own brackets add no nesting beneath them."""
    return sum(1 for value in values if isinstance(value, dict | list | tuple))


def dump_json(value: JSON, what: str) -> str:
    """JSON text for a payload, checkpoint or result; InvalidInput if it is not JSON,
    holds text one of the databases cannot store, or nests deeper than MAX_JSON_DEPTH
    (walked first, so the encoder never recurses past it)."""
    storable_json(value, what)
    try:
        return _COMPACT.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{what} is not JSON-serialisable: {exc}") from exc


def dump_batch(rows: Sequence[Mapping[str, Any]], values: Sequence[JSON], what: str) -> str:
    """One JSON document for a batch of rows that carry the JSON ``values`` (and otherwise only
    scalars already found storable); InvalidInput as dump_json would raise it for the values
    in turn, which it raises only for a batch that is refused."""
    try:
        text = _COMPACT.encode(rows)
    except (TypeError, ValueError, RecursionError) as exc:
        _refuse(values, what, exc)
    # The list, each row and each value's own brackets are at the top: only those beyond can nest.
    if _needs_walk(text, 1 + len(rows) + _tops(values)):
        for value in values:
            storable_json(value, what)
    return text


def dump_values(values: Sequence[JSON], what: str) -> list[str]:
    """dump_json of each value, refused as dump_batch refuses a batch."""
    encode = _COMPACT.encode
    try:
        texts = [encode(value) for value in values]
    except (TypeError, ValueError, RecursionError) as exc:
        _refuse(values, what, exc)
    for value, text in zip(values, texts, strict=True):
        if _needs_walk(text, _tops([value])):  # the walk only for a value that may need it (see _COMPACT)
            storable_json(value, what)
    return texts


def _refuse(values: Sequence[JSON], what: str, exc: Exception) -> NoReturn:
    """A batch did not encode: the error dump_json raises for its values one after the other
    (the first value storable_json refuses, else the first that is not JSON)."""
    for value in values:
        storable_json(value, what)
    for value in values:
        dump_json(value, what)
    raise InvalidInput(f"{what} is not JSON-serialisable: {exc}") from exc


def dump_payloads(payloads: Sequence[JSON], limit: int) -> list[str]:
    """The payloads of an enqueue as stored JSON text: the payload rules, one home for every
    path in (the API, a batch, the CLI, Queue, a schedule, a handler's ctx.enqueue): storable
    JSON (dump_values: text, numbers, MAX_JSON_DEPTH) of at most ``limit`` bytes each."""
    texts = dump_values(payloads, "payload")
    _within(texts, limit)
    return texts


def dump_payload_batch(rows: Sequence[Mapping[str, Any]], payloads: Sequence[JSON], limit: int) -> str:
    """dump_batch of jobs' rows, each payload within ``limit`` bytes (as dump_payloads refuses)."""
    text = dump_batch(rows, payloads, "payload")
    if len(text) > limit:  # each payload's text is a part of the batch's: only a larger batch can hold a larger one
        _within(dump_values(payloads, "payload"), limit)
    return text


def _within(texts: Sequence[str], limit: int) -> None:
    """PayloadTooLarge for the first text over ``limit`` bytes: ASCII, so its length is its size
    (_COMPACT escapes the rest, so a client's compact UTF-8 of it is never larger)."""
    for index, text in enumerate(texts):
        if len(text) > limit:
            what = "payload" if len(texts) == 1 else f"jobs[{index}].payload"
            raise PayloadTooLarge(
                f"{what} is {len(text)} bytes of JSON, over the limit of {limit} (JOBQ_MAX_BODY_BYTES); "
                "nothing was written"
            )


def submit_body_limit(max_payload_bytes: int) -> int:
    """The body cap of a single submit: its payload's bound and SUBMIT_ENVELOPE_BYTES."""
    return max_payload_bytes + SUBMIT_ENVELOPE_BYTES


def check_result_size(text: str, limit: int, what: str = "result") -> str:
    """A result's JSON text within ``limit`` bytes (UTF-8), else ResultTooLarge naming both and the setting."""
    # len(text) counts characters: the text is ASCII (see _COMPACT) when dump_json made it,
    # but the bound is on bytes, so count bytes whenever the characters alone could pass it.
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > limit:
        raise ResultTooLarge(
            f"{what} is {size} bytes, over the limit of {limit} (JOBQ_MAX_RESULT_BYTES); "
            "keep large artefacts in object storage and return a reference to them"
        )
    return text


def storable_error(error: str) -> str:
    """An error message as both databases can store it: a handler's text is not ours to refuse."""
    return error.replace("\x00", "\\0").encode("utf-8", "backslashreplace").decode("utf-8")


def check_progress(done: int | None, total: int | None) -> None:
    for name, value in (("done", done), ("total", total)):
        if value is not None and (not is_int(value) or not 0 <= value <= MAX_TOTAL):
            raise InvalidInput(f"{name} must be a non-negative integer (at most {MAX_TOTAL})")
    if done is not None and total is not None and total > 0 and done > total:
        raise InvalidInput(f"done ({done}) cannot exceed total ({total})")


def check_lease_seconds(lease_seconds: float, what: str = "lease_seconds") -> None:
    if (
        not isinstance(lease_seconds, int | float)
        or isinstance(lease_seconds, bool)
        or not 0 < lease_seconds <= MAX_LEASE_SECONDS
    ):
        raise InvalidInput(f"{what} must be a number in (0, {MAX_LEASE_SECONDS}]")


def check_claim(worker: str, limit: int, lease_seconds: float) -> None:
    """A claim's arguments, as both stores check them before writing anything."""
    if limit < 1:
        raise InvalidInput("claim limit must be at least 1")
    if not worker:
        raise InvalidInput("worker must be a non-empty string")
    check_lease_seconds(lease_seconds)


def check_page_size(limit: int) -> None:
    if not is_int(limit) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidInput(f"a page holds 1 to {MAX_PAGE_SIZE} jobs, not {limit!r}")


def validate_new_job(job: NewJob) -> None:
    """Reject a job that must not be stored; raise InvalidInput naming the field."""
    _validate_new_job(job, set())


def validate_new_jobs(jobs: Sequence[NewJob]) -> None:
    """validate_new_job for every job of a batch; a name the batch repeats (its kind, queue,
    tenant) is checked for storable text once, not once per job."""
    names: set[str] = set()
    for job in jobs:
        _validate_new_job(job, names)


def _storable_name(value: str, what: str, names: set[str]) -> None:
    if value not in names:
        storable_text(value, what)
        names.add(value)


def _validate_new_job(job: NewJob, names: set[str]) -> None:
    if not isinstance(job.kind, str) or not job.kind.strip():
        raise InvalidInput("kind must be a non-empty string")
    if len(job.kind) > MAX_NAME_LENGTH:
        raise InvalidInput(f"kind must be at most {MAX_NAME_LENGTH} characters")
    if not isinstance(job.payload, dict):
        raise InvalidInput(f"payload must be a JSON object, not {type(job.payload).__name__}")
    _storable_name(job.kind, "kind", names)
    for name in ("queue", "tenant"):
        value = getattr(job, name)
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME_LENGTH:
            raise InvalidInput(f"{name} must be a non-empty string of at most {MAX_NAME_LENGTH} characters")
        _storable_name(value, name, names)
    if not is_int(job.priority) or not 0 <= job.priority <= MAX_PRIORITY:
        raise InvalidInput(f"priority must be an integer from 0 to {MAX_PRIORITY}")
    if job.max_attempts is not None and (
        not is_int(job.max_attempts) or not 1 <= job.max_attempts <= MAX_ATTEMPTS_LIMIT
    ):
        raise InvalidInput(f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS_LIMIT}")
    if job.total is not None and (not is_int(job.total) or not 0 <= job.total <= MAX_TOTAL):
        raise InvalidInput(f"total must be a non-negative integer (at most {MAX_TOTAL})")
    if (
        not isinstance(job.delay_seconds, int | float)
        or isinstance(job.delay_seconds, bool)
        or not 0 <= job.delay_seconds <= MAX_DELAY_SECONDS
    ):
        raise InvalidInput(f"delay_seconds must be a non-negative number of seconds (at most {MAX_DELAY_SECONDS})")
    if job.run_after is not None and job.run_after.tzinfo is None:
        raise InvalidInput("run_after must carry a time zone")
    if job.idempotency_key is not None:
        check_idempotency_key(job.idempotency_key)
    if job.concurrency_key is not None:
        value = job.concurrency_key
        if not isinstance(value, str) or not value or len(value) > MAX_KEY_LENGTH:
            raise InvalidInput(f"concurrency_key must be a non-empty string of at most {MAX_KEY_LENGTH} characters")
        storable_text(value, "concurrency_key")


def check_idempotency_key(value: object, what: str = "idempotency_key") -> str:
    """The one rule for an idempotency key, wherever it comes in (the Idempotency-Key header, a
    batch's body, the CLI, the library): 1 to MAX_KEY_LENGTH characters of visible ASCII
    (IDEMPOTENCY_KEY_PATTERN). Other text would reach the store as different bytes by header
    (read as Latin-1) and by body (UTF-8), and name two jobs; a client percent-encodes or
    hashes it first."""
    if not isinstance(value, str) or not value or len(value) > MAX_KEY_LENGTH:
        raise InvalidInput(f"{what} must be a non-empty string of at most {MAX_KEY_LENGTH} characters")
    bad = next((char for char in value if not "!" <= char <= "~"), None)
    if bad is not None:
        raise InvalidInput(
            f"{what} must be visible ASCII ('!' to '~', no space), as an HTTP header carries it; "
            f"it holds {bad!r}: percent-encode or hash other text"
        )
    return value


def check_item_outcome(item: ItemOutcome) -> None:
    """An outcome the store may write: a non-negative index, a failure with an error."""
    if not is_int(item.index) or item.index < 0:
        raise InvalidInput("an item index must be a non-negative integer")
    if item.state is ItemState.FAILED and (not isinstance(item.error, str) or not item.error.strip()):
        raise InvalidInput(f"failed item {item.index} needs a non-empty error")


def check_throughput_window(window_seconds: float, buckets: int) -> float:
    """A throughput window: positive seconds cut into 1 to 1,440 buckets; returns a bucket's width."""
    if not is_int(buckets) or not 1 <= buckets <= 1_440:
        raise InvalidInput("buckets must be an integer from 1 to 1440")
    number = isinstance(window_seconds, int | float) and not isinstance(window_seconds, bool)
    if not number or not 0 < window_seconds < math.inf:
        raise InvalidInput("window_seconds must be a positive number")
    return float(window_seconds) / buckets


def token_tenant(tenant: str, token_hash: str, admin: bool) -> str:
    """The tenant column of a new token: an admin token's is ADMIN_TENANT; a tenant token names another."""
    if not token_hash:
        raise InvalidInput("a token needs a hash")
    if admin:
        return ADMIN_TENANT
    if not tenant or tenant == ADMIN_TENANT:
        raise InvalidInput(f"a tenant token needs a tenant other than {ADMIN_TENANT!r}")
    return tenant
