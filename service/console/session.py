"""Who may use the console, and the CSRF check on everything that changes something.

- **Login**: an operator pastes an admin token (``jobq token create --admin``) once; the
  console checks it (its SHA-256, like every token) and starts a server-side session: a
  random id in the cookie, only its SHA-256 in ``console_sessions`` with the token it came
  from. The cookie is ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's
  page sends it), ``Secure`` when the console is served over HTTPS, path ``/ui``. Any number
  of API processes share sessions through the database.
- **A session ends** at logout (its row is deleted: a copied cookie opens nothing), when its
  token is revoked (every request joins the token), after ``IDLE_SECONDS`` without a request,
  and ``SESSION_SECONDS`` after the login whatever happens. A tenant's token is refused
  exactly like an unknown one.
- **Login attempts** are limited per client (:class:`LoginLimiter`): a guessing script gets a
  429 page after a few refusals, per API process.
- **CSRF**: every form that changes something (login, logout, cancel, replay) carries the
  value of the ``jobq_csrf`` cookie (random, set with the first page and kept as long as the
  browser keeps it), and the POST is refused (403) unless the two match: another site can
  make a browser send the cookie (not with SameSite=Strict, but older browsers) yet cannot
  read it to put in the form.
- **JOBQ_AUTH=off** (``jobq dev``): no login; every page says in a banner that the console
  is open. The CSRF check still applies.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import Request, Response
from starlette.concurrency import run_in_threadpool

from service.config import Settings
from service.jobs import ApiToken
from service.store import Store
from service.tokens import hash_token, plausible

SESSION_COOKIE = "jobq_session"
FLASH_COOKIE = "jobq_flash"
CSRF_COOKIE = "jobq_csrf"
CSRF_FIELD = "csrf"
COOKIE_PATH = "/ui"
SESSION_SECONDS = 12 * 3600  # a working day: then the operator logs in again
IDLE_SECONDS = 30 * 60  # a session unused this long has ended (a laptop left open)
TOUCH_AFTER_SECONDS = 60.0  # a request writes the session's last use at most once a minute
SESSION_ID_LENGTH = 43  # secrets.token_urlsafe(32)
LOGIN_ATTEMPTS = 5  # refused logins a client may make per LOGIN_WINDOW_SECONDS
LOGIN_WINDOW_SECONDS = 60.0


@dataclass(frozen=True)
class Operator:
    """Who is using the console: an admin token's name (or id), or nobody when auth is off."""

    name: str
    open: bool = False  # JOBQ_AUTH=off: no login, a banner says so
    read_only: bool = False  # a read-only operator's token (jobq token create --admin --read-only)

    def require_act(self) -> None:
        """Refuse a change to a read-only operator (403, nothing changed)."""
        if self.read_only:
            raise ReadOnlyRefused()

    @property
    def replayed_by(self) -> str:
        """What job_replays records as who replayed (``jobq replay`` records ``cli:$USER``)."""
        return f"console:{self.name}"


class LoginRequired(Exception):
    """No valid session: a page answers with the login form, a script's request and a POST with 401."""


class ReadOnlyRefused(Exception):
    """A read-only operator asked for a change: 403, nothing changed."""


class CsrfRefused(Exception):
    """A state-changing request without the right CSRF token: 403, nothing changed."""


def _session_hash(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


def _plausible_session(session_id: str) -> bool:
    return len(session_id) == SESSION_ID_LENGTH and all(c.isalnum() or c in "-_" for c in session_id)


async def current_operator(request: Request, settings: Settings, store: Store) -> Operator:
    if not settings.auth:
        return Operator(name="auth-off", open=True)
    session_id = request.cookies.get(SESSION_COOKIE, "")
    if not _plausible_session(session_id):
        raise LoginRequired()
    record = await run_in_threadpool(
        store.console_session, _session_hash(session_id), IDLE_SECONDS, TOUCH_AFTER_SECONDS
    )
    if record is None:
        raise LoginRequired()
    return Operator(name=record.name or str(record.id), read_only=record.read_only)


async def admin_token_of(store: Store, token: str) -> ApiToken | None:
    """The live admin token pasted at login; a tenant's, a revoked or an unknown one: None, alike."""
    token = token.strip()
    if not plausible(token):
        return None
    return await run_in_threadpool(store.admin_token, hash_token(token))


@dataclass
class LoginLimiter:
    """Refused logins per client (its address as the server sees it, the proxy's client with
    --proxy-headers), in a sliding window: after ``attempts`` refusals in ``window`` seconds,
    every login of that client is refused unseen until the oldest leaves the window. Kept in
    the process (each API process counts its own): enough to make guessing a 256-bit token
    slower still, and a database outage cannot lock operators out."""

    attempts: int = LOGIN_ATTEMPTS
    window: float = LOGIN_WINDOW_SECONDS
    clock: Callable[[], float] = time.monotonic
    _refused: dict[str, deque[float]] = field(default_factory=dict)

    def wait_seconds(self, client: str) -> float:
        """0 when the client may try now, else how long until it may."""
        now = self.clock()
        refused = self._refused.get(client)
        if refused is None:
            return 0.0
        while refused and refused[0] <= now - self.window:
            refused.popleft()
        if not refused:
            del self._refused[client]
            return 0.0
        return refused[0] + self.window - now if len(refused) >= self.attempts else 0.0

    def refused(self, client: str) -> None:
        self._refused.setdefault(client, deque()).append(self.clock())
        if len(self._refused) > 10_000:  # a flood of addresses: forget the quietest, stay small
            self._refused.pop(next(iter(self._refused)))


def client_of(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def csrf_token(request: Request) -> str:
    """The browser's CSRF value (made now for a browser that has none yet; see set_cookies)."""
    existing = request.cookies.get(CSRF_COOKIE, "")
    if len(existing) == 43:  # secrets.token_urlsafe(32)
        return existing
    made: str | None = getattr(request.state, "new_csrf", None)
    if made is None:
        made = request.state.new_csrf = secrets.token_urlsafe(32)
    return made


def require_csrf(request: Request, submitted: str | None) -> None:
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not cookie or not submitted or not hmac.compare_digest(cookie.encode(), submitted.encode()):
        raise CsrfRefused()


def _secure(request: Request) -> bool:
    return request.url.scheme == "https"


def set_cookies(request: Request, response: Response) -> None:
    """Give a browser that has no CSRF cookie the one its page's forms carry."""
    made = getattr(request.state, "new_csrf", None)
    if made is not None:
        response.set_cookie(
            CSRF_COOKIE, made, path=COOKIE_PATH, httponly=True, samesite="strict", secure=_secure(request)
        )


async def start_session(request: Request, response: Response, store: Store, token: ApiToken) -> None:
    session_id = secrets.token_urlsafe(32)
    await run_in_threadpool(
        store.start_console_session, _session_hash(session_id), token.id, SESSION_SECONDS, IDLE_SECONDS
    )
    response.set_cookie(
        SESSION_COOKIE,
        session_id,
        max_age=SESSION_SECONDS,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )


async def end_session(request: Request, response: Response, store: Store) -> None:
    session_id = request.cookies.get(SESSION_COOKIE, "")
    if _plausible_session(session_id):
        await run_in_threadpool(store.end_console_session, _session_hash(session_id))
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict", secure=_secure(request))


# -- flash: the notice a change leaves for the next page ------------------------------------------
#
# "Replayed 3 jobs" comes from the server that did it, never from the URL (a link with
# ?replayed=999999 would make the console say what never happened). The POST that made the
# change sets a short-lived cookie naming the notice and its count, signed with the browser's
# CSRF value (a secret no other site and no link knows); the next page shows it once.


def _flash_signature(request: Request, text: str) -> str:
    key = request.cookies.get(CSRF_COOKIE, "")
    return hmac.new(key.encode(), text.encode(), hashlib.sha256).hexdigest()[:32]


def set_flash(request: Request, response: Response, notice: str, count: int = 0) -> None:
    text = f"{notice}.{count}"
    response.set_cookie(
        FLASH_COOKIE,
        f"{text}.{_flash_signature(request, text)}",
        max_age=60,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )


def take_flash(request: Request) -> tuple[str, int] | None:
    """The notice left for this page, if its signature holds (see set_flash and clear_flash)."""
    notice, _, rest = request.cookies.get(FLASH_COOKIE, "").partition(".")
    count, _, signature = rest.partition(".")
    if not notice or not count.isdigit() or not signature or not request.cookies.get(CSRF_COOKIE):
        return None
    if not hmac.compare_digest(signature, _flash_signature(request, f"{notice}.{count}")):
        return None
    return notice, int(count)


def clear_flash(request: Request, response: Response) -> None:
    if FLASH_COOKIE in request.cookies:
        response.delete_cookie(
            FLASH_COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict", secure=_secure(request)
        )
