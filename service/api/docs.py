"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc) from local files, so they work offline.

FastAPI's own pages load their JavaScript, CSS, favicon (and ReDoc its fonts) from
CDNs: on a machine without internet ``/docs`` is a blank page. The assets here come
from the ``fastapi-offline`` package's data (Swagger UI's bundle and CSS, ReDoc's
standalone bundle, a favicon), served by jobq itself at ``/docs-static``. ReDoc's bundle
still names one image of another host, the Redocly logo beside "API docs by Redocly" in its
side menu; jobq serves the bundle with a blank image in its place, so that reading the API
asks nothing of the internet (offline, that request is an error in the browser's console).
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs-static"
REDOC_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
BLANK_IMAGE = b"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg' width='1' height='1'/%3E"


def offline_redoc_bundle() -> bytes:
    """ReDoc's standalone bundle with its one image of another host replaced by a blank one."""
    return (files("fastapi_offline") / "static" / "redoc.standalone.js").read_bytes().replace(REDOC_LOGO, BLANK_IMAGE)


def mount_docs(app: FastAPI) -> None:
    """Serve the two documentation pages and their assets (the app is made with docs_url=None)."""
    redoc_bundle = offline_redoc_bundle()

    # Before the mount: this route, not the package's file, answers for ReDoc's bundle.
    @app.get(f"{ASSETS}/redoc.standalone.js", include_in_schema=False)
    async def redoc_js() -> Response:
        return Response(redoc_bundle, media_type="text/javascript", headers={"Cache-Control": "public, max-age=3600"})

    app.mount(ASSETS, StaticFiles(packages=[("fastapi_offline", "static")]), name="docs-static")
    title = app.title

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{title} - Swagger UI",
            oauth2_redirect_url="/docs/oauth2-redirect",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon.png",
        )

    @app.get("/docs/oauth2-redirect", include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json",
            title=f"{title} - ReDoc",
            redoc_js_url=f"{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
