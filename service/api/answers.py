"""A job's status as an HTTP answer (status code, headers, body), built in one place.

The submit, the status poll and the cancel answer with a job's status. Each answer is
made here once, by :func:`job_answer`, and sent two ways: a route returns
:meth:`Answer.response` (FastAPI sends a Response it is given as it is; the route's
``response_model`` then only documents it in OpenAPI), and a fast entrance
(:mod:`service.api.fast_poll`, :mod:`service.api.fast_submit`) sends it straight over
ASGI with :meth:`Answer.send`. So the two ways answer alike by construction, not by
two copies held together by a test.

The routes stay, rather than being taken off the hot path and documented some other
way: a route is what OpenAPI (and schemathesis) read, and it answers everything a fast
entrance leaves to it (a long poll, a body FastAPI must validate and explain, a +json
or chunked body, every error of a poll). A fast entrance only skips FastAPI's
per-request machinery for the common case; what it sends is the route's answer.

    submit    202  Location, Retry-After (while the job is not terminal)
    poll      200  ETag, Retry-After
    cancel    200  Retry-After
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from starlette.responses import Response
from starlette.types import Send

from service.api.schemas import JOB_OUT
from service.jobs import JobStatus
from service.status import JobOut, job_url
from service.web import change_tag, poll_after_seconds

Header = tuple[bytes, bytes]


class Answer(NamedTuple):
    status: int
    headers: list[Header]  # as ASGI sends them: lower-case names, latin-1 bytes
    body: bytes

    async def send(self, send: Send) -> None:
        """Send it as the whole response (a fast entrance)."""
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        await send({"type": "http.response.body", "body": self.body})

    def response(self) -> Response:
        """The same answer as a Response, for a route."""
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in self.headers}
        return Response(self.body, self.status, headers=headers)


def job_answer(status: JobStatus, now: datetime, code: int = 200, *extra: Header) -> Answer:
    """The job's status as JSON (JobOut) with its poll hint in the body and in Retry-After."""
    hint = poll_after_seconds(status, now)
    body = JOB_OUT.dump_json(JobOut.of(status, hint))
    headers = [(b"content-length", str(len(body)).encode("latin-1")), (b"content-type", b"application/json"), *extra]
    if hint is not None:
        headers.append((b"retry-after", str(hint).encode("latin-1")))
    return Answer(code, headers, body)


def submitted(status: JobStatus, now: datetime) -> Answer:
    """``POST /v1/jobs``: 202, and the job's URL in Location."""
    return job_answer(status, now, 202, (b"location", job_url(status.id).encode("latin-1")))


def polled(status: JobStatus, now: datetime) -> Answer:
    """``GET /v1/jobs/{id}``: 200, and the job's change tag in ETag (what If-None-Match compares)."""
    return job_answer(status, now, 200, (b"etag", change_tag(status).encode("latin-1")))
