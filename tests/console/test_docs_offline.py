"""/docs and /redoc work offline: every asset they reference is served by jobq itself."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlparse

from tests.api.conftest import LiveApi

ASSET = re.compile(r"""(?:src|href)\s*=\s*["']([^"']+)["']|url\s*:\s*['"]([^'"]+)['"]""")


def test_docs_and_redoc_reference_only_assets_jobq_serves(api: LiveApi) -> None:
    http = api.http()
    for page in ("/docs", "/redoc"):
        answer = http.get(page)
        assert answer.status_code == 200, page
        html = answer.text
        assert not re.search(r"https?://", html), f"{page} names another host:\n{html}"
        assets = [a or b for a, b in ASSET.findall(html)]
        assert any(a.endswith(".js") for a in assets), f"{page} loads no script? {assets}"
        for asset in assets:
            url = urljoin(api.url + page, asset)
            assert urlparse(url).netloc == urlparse(api.url).netloc, asset
            fetched = http.get(url)
            assert fetched.status_code == 200 and len(fetched.content) > 0, f"{page}: {asset} -> {fetched.status_code}"
    assert http.get("/openapi.json").json()["info"]["title"] == "jobq"
    bundle = http.get("/docs-static/swagger-ui-bundle.js")
    assert bundle.headers["content-type"].startswith(("text/javascript", "application/javascript"))
    assert len(bundle.content) > 500_000  # Swagger UI itself, not a stub


def test_the_console_page_assets_are_package_data_served_by_jobq(start_api, store_url: str) -> None:
    api = start_api(store_url, auth=False)
    http = api.http()
    html = http.get("/ui").text
    assets = [a or b for a, b in ASSET.findall(html) if (a or b).startswith("/ui/static/")]
    assert sorted(assets) == ["/ui/static/console.css", "/ui/static/console.js"]
    for asset in assets:
        assert http.get(asset).status_code == 200
    assert not re.search(r"https?://", html)
