"""Who may use the console, and the CSRF check on everything that changes something.

- **Login**: an operator pastes an admin token (``jobq token create --admin``) once;
  the console checks it (its SHA-256, like every token) and keeps it in a session
  cookie: ``HttpOnly`` (no script reads it), ``SameSite=Strict`` (no other site's
  page sends it), ``Secure`` when the console is served over HTTPS, path ``/ui``.
  Every request looks the token up again, so a revoked token ends its sessions at
  once, and any number of API processes share sessions without shared state. A
  tenant's token is refused exactly like an unknown one.
- **CSRF**: every form that changes something (login, logout, cancel, replay)
  carries the value of the ``jobq_csrf`` cookie (random, set with the first page
  and kept as long as the browser keeps it), and the POST is refused (403) unless
  the two match: another site can make a browser send the cookie (not with
  SameSite=Strict, but older browsers) yet cannot read it to put in the form.
- **JOBQ_AUTH=off** (``jobq dev``): no login; every page says in a banner that the
  console is open. The CSRF check still applies.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from fastapi import Request, Response
from starlette.concurrency import run_in_threadpool

from service.config import Settings
from service.store import Store
from service.tokens import hash_token, plausible

SESSION_COOKIE = "jobq_session"
FLASH_COOKIE = "jobq_flash"
CSRF_COOKIE = "jobq_csrf"
CSRF_FIELD = "csrf"
COOKIE_PATH = "/ui"
SESSION_SECONDS = 12 * 3600  # a working day: the browser forgets the session, the token stays valid


@dataclass(frozen=True)
class Operator:
    """Who is using the console: an admin token's name (or id), or nobody when auth is off."""

    name: str
    open: bool = False  # JOBQ_AUTH=off: no login, a banner says so

    @property
    def replayed_by(self) -> str:
        """What job_replays records as who replayed (``jobq replay`` records ``cli:$USER``)."""
        return f"console:{self.name}"


class LoginRequired(Exception):
    """No valid session: a page answers with the login form, a POST with 401."""


class CsrfRefused(Exception):
    """A state-changing request without the right CSRF token: 403, nothing changed."""


async def current_operator(request: Request, settings: Settings, store: Store) -> Operator:
    if not settings.auth:
        return Operator(name="auth-off", open=True)
    token = request.cookies.get(SESSION_COOKIE, "")
    if not plausible(token):
        raise LoginRequired()
    record = await run_in_threadpool(store.admin_token, hash_token(token))
    if record is None:
        raise LoginRequired()
    return Operator(name=record.name or str(record.id))


async def check_admin_token(store: Store, token: str) -> bool:
    """Is this a live admin token? A tenant's, a revoked or an unknown one: no, alike."""
    token = token.strip()
    return plausible(token) and await run_in_threadpool(store.admin_token, hash_token(token)) is not None


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


def start_session(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        token.strip(),
        max_age=SESSION_SECONDS,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=_secure(request),
    )


def end_session(request: Request, response: Response) -> None:
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
