"""The security headers on every console response (``/ui`` and its assets).

- ``Content-Security-Policy``: scripts, styles, images and requests from the console itself
  only (no inline script or style, so an escaping bug cannot become a script), forms post only
  to it, and ``frame-ancestors 'none'``: no other page may frame the console (clickjacking a
  Cancel button). ``X-Frame-Options: DENY`` says the same to older browsers.
- ``X-Content-Type-Options: nosniff``: a JSON answer is never run as a script.
- ``Referrer-Policy: same-origin``: a job's URL (its id) is not sent to other sites.
- ``Cache-Control: no-store``: pages hold jobs, payloads and errors; no shared or disk cache
  keeps them after logout.

A pure ASGI middleware (not BaseHTTPMiddleware), so that a job page's long poll streams
through it unchanged.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
)
HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
]
_REPLACED = {name for name, _ in HEADERS}


def is_console_path(path: str) -> bool:
    return path == "/ui" or path.startswith("/ui/")


class ConsoleHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not is_console_path(scope["path"]):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _REPLACED]
                message = {**message, "headers": kept + HEADERS}
            await send(message)

        await self.app(scope, receive, with_headers)
