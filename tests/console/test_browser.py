"""The console in a real browser: Debian's headless Chromium driven by Selenium through
/usr/bin/chromedriver (no browser download), against the real API under uvicorn on
PostgreSQL and a real ``jobq worker`` process running the example handlers.

One world per module (a database, the API with auth on, a worker, one Chromium), so
the browser starts once; each test makes jobs of its own (in its own queue where a
count matters) and saves a screenshot under its tmp_path. After every test the
browser's console log must hold no error.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode, urlparse

import pytest

from service.config import Settings
from service.jobs import NewJob
from service.limits import Limit
from service.retry import GiveUp
from service.schedules import ScheduleSpec
from tests.api.conftest import LiveApi, run_api
from tests.cli.test_cli import jobq
from tests.conftest import Database, PostgresServer
from tests.console.conftest import admin_token
from tests.worker.harness import WorkerProcess

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    NoAlertPresentException,
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PARKED = "parked"  # a queue no worker serves: what is put there stays where it is put
# A name the browser maps to 127.0.0.1: pages reached by a name that is not "localhost" or "127.0.0.1", as a
# deployed jobq is (Swagger UI, for one, calls an online validator only for such names).
SERVER_NAME = "jobq.test"
T = TypeVar("T")


def until(predicate: Callable[[], T], timeout: float = 15.0, what: str = "condition") -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.1)


class World:
    def __init__(self, api: LiveApi, db: Database, driver: Any, worker: WorkerProcess) -> None:
        self.api, self.db, self.driver, self.worker = api, db, driver, worker
        self.token = admin_token(api, "alice")

    def open(self, path: str) -> None:
        self.driver.get(self.api.url + path)

    def log_in(self) -> None:
        self.open("/ui/login")
        if self.driver.current_url.endswith("/ui/login") or "/ui/login?" in self.driver.current_url:
            self.driver.find_element(By.ID, "token").send_keys(self.token)
            self.driver.find_element(By.CSS_SELECTOR, "form.login button").click()
            until(lambda: "/ui/login" not in self.driver.current_url, what="the login to go through")

    def text(self, css: str) -> str:
        """An element's text; "" while the page is being replaced (a job page reloads once its job ends)."""
        try:
            return str(self.driver.find_element(By.CSS_SELECTOR, css).text)
        except (StaleElementReferenceException, NoSuchElementException):
            return ""

    def accept_confirmation(self) -> str:
        def alert() -> Any:
            try:
                return self.driver.switch_to.alert
            except NoAlertPresentException:
                return None

        dialog = until(alert, 5, "the confirmation dialog")
        question = str(dialog.text)
        dialog.accept()
        return question

    def console_errors(self) -> list[str]:
        return [entry["message"] for entry in self.driver.get_log("browser") if entry["level"] == "SEVERE"]

    def requested_urls(self) -> list[str]:
        """The http(s) URLs the page asked for since the last call (the DevTools network log)."""
        urls = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                url = str(message["params"]["request"]["url"])
                if url.startswith(("http://", "https://")):
                    urls.append(url)
        return urls

    def screenshot(self, tmp_path: Path, name: str) -> Path:
        path = tmp_path / f"{name}.png"
        assert self.driver.save_screenshot(str(path)), path
        return path


@pytest.fixture(scope="module")
def world(
    postgres_server: PostgresServer, pg_template: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("the browser tests need Debian's chromium and chromium-driver (.ci/run installs them)")
    name, url = postgres_server.copy_of(pg_template)
    logs = tmp_path_factory.mktemp("console-world")
    worker = WorkerProcess(
        url,
        logs,
        "worker",
        ["--queues", "default", "--lease-seconds", "3", "--concurrency", "4"],
        app="service.examples",
    )
    api = run_api(Settings(database_url=url))
    profile = tempfile.mkdtemp(prefix="jobq-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
        f"--host-resolver-rules=MAP {SERVER_NAME} 127.0.0.1",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    db = Database(url)
    try:
        worker.wait_started(40)
        yield World(api, db, driver, worker)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
        worker.terminate()
        try:
            worker.wait(20)
        except Exception:
            worker.kill()
        api.server.force_exit = True  # a job page's long poll may still be waiting: do not wait for it
        api.stop()
        db.close()
        postgres_server.drop_database(name)


@pytest.fixture
def ui(world: World) -> Iterator[World]:
    """The world, logged in, at 1280 px; after the test, the browser's console must hold no error."""
    world.driver.set_window_size(1280, 900)
    world.log_in()
    # Live refresh off (this browser remembers it): a test reads a page as it was rendered;
    # the live refresh test turns it on.
    world.driver.execute_script("localStorage.setItem('jobq-live', 'off')")
    world.console_errors()  # drain what came before this test
    yield world
    assert world.console_errors() == []


def _park(world: World, **fields: Any) -> Any:
    return world.api.store.enqueue(NewJob(queue=PARKED, **{"kind": "sleep", **fields}))


def test_an_admin_token_logs_in_and_a_tenant_token_is_refused(world: World, tmp_path: Path) -> None:
    driver = world.driver
    driver.delete_all_cookies()
    world.open("/ui/jobs")
    until(lambda: "/ui/login" in driver.current_url, what="the login page")
    driver.find_element(By.ID, "token").send_keys(world.api.token("acme"))
    driver.find_element(By.CSS_SELECTOR, "form.login button").click()
    assert "not a valid admin token" in until(lambda: world.text("main"), what="the refusal")
    world.screenshot(tmp_path, "login-refused")
    world.console_errors()  # the refusal's 401 is logged by the browser: expected, drained

    driver.find_element(By.ID, "token").send_keys(world.token)
    driver.find_element(By.CSS_SELECTOR, "form.login button").click()
    until(lambda: driver.current_url.endswith("/ui/jobs"), what="the jobs page after login")
    assert "Log out (alice)" in world.text("header")
    world.screenshot(tmp_path, "logged-in")
    assert world.console_errors() == []


def test_the_overview_shows_the_counts_the_database_has(ui: World, tmp_path: Path) -> None:
    store = ui.api.store
    for _ in range(3):
        _park(ui)
    for _ in range(2):
        _park(ui, delay_seconds=3600)
    for outcome in ("ok", "ok", "failed"):
        _park(ui, kind=f"seed-{outcome}")
        [claimed] = store.claim("seeder", [PARKED], 1, 30, kinds=[f"seed-{outcome}"])
        if outcome == "ok":
            store.complete(claimed.lease, None)
        else:
            store.fail(claimed.lease, "ValueError: seeded", GiveUp())

    ui.open("/ui")
    row = ui.driver.find_element(By.CSS_SELECTOR, f'tr[data-queue="{PARKED}"]')
    cells = row.find_elements(By.CSS_SELECTOR, "td[data-col]")
    shown = {cell.get_attribute("data-col"): int(cell.text) for cell in cells}
    counted = ui.db.one(
        """SELECT count(*) FILTER (WHERE state = 'queued') AS queued,
                  count(*) FILTER (WHERE state = 'queued' AND run_after <= now()) AS due,
                  count(*) FILTER (WHERE state = 'queued' AND run_after > now()) AS waiting,
                  count(*) FILTER (WHERE state = 'running') AS running,
                  count(*) FILTER (WHERE state = 'succeeded' AND finished_at > now() - interval '1 hour') AS succeeded,
                  count(*) FILTER (WHERE state = 'failed' AND finished_at > now() - interval '1 hour') AS failed
           FROM jobs WHERE queue = %(queue)s""",
        queue=PARKED,
    )
    assert shown == {name: int(value) for name, value in counted.items()}
    assert shown == {"queued": 5, "due": 3, "waiting": 2, "running": 0, "succeeded": 2, "failed": 1}
    assert int(ui.text("#workers-alive")) == ui.db.count("workers", "last_seen_at > now() - interval '30 seconds'") == 1

    def figure(name: str) -> str:
        return str(row.find_element(By.CSS_SELECTOR, f'td[data-figure="{name}"]').text)

    assert figure("failure-ratio") == "33 %"  # 1 failed of 3 finished in the hour
    oldest = ui.db.one(
        "SELECT extract(epoch FROM now() - min(run_after))::float8 AS age FROM jobs "
        "WHERE queue = %(queue)s AND state = 'queued' AND run_after <= now()",
        queue=PARKED,
    )["age"]
    assert figure("oldest-due").endswith(" s") and abs(int(figure("oldest-due")[:-2]) - oldest) <= 2
    assert figure("workers") == "0"  # the worker serves "default" only
    # The last hour's chart: twelve 5-minute bars, which between them hold the hour's outcomes.
    bars = [str(t.get_attribute("textContent")) for t in row.find_elements(By.CSS_SELECTOR, "svg.chart title")]
    assert len(bars) == 12
    outcomes = [tuple(int(n) for n in re.findall(r"(\d+) (?:succeeded|failed)", bar)) for bar in bars]
    assert (sum(s for s, _ in outcomes), sum(f for _, f in outcomes)) == (2, 1), bars

    # `jobq stats` prints the same numbers.
    stats = json.loads(jobq("stats", "--json", url=ui.api.settings.database_url, cwd=tmp_path).stdout)
    [queue] = [q for q in stats["queues"] if q["queue"] == PARKED]
    assert {name: queue[name] for name in ("queued", "due", "running")} == {"queued": 5, "due": 3, "running": 0}
    assert stats["workers_alive"] == int(ui.text("#workers-alive"))
    ui.screenshot(tmp_path, "overview")


def test_the_job_list_filters_and_pages_through_every_job(ui: World, tmp_path: Path) -> None:
    made = [_park(ui, kind="paged", payload={"i": i}).id for i in range(57)]
    _park(ui, kind="other")
    ui.open("/ui/jobs")
    ui.driver.find_element(By.NAME, "kind").send_keys("paged")
    ui.driver.find_element(By.NAME, "queue").send_keys(PARKED)
    ui.driver.find_element(By.CSS_SELECTOR, "form.filters button").click()
    until(lambda: "kind=paged" in ui.driver.current_url, what="the filtered list")

    seen: list[str] = []
    for _ in range(3):
        links = ui.driver.find_elements(By.CSS_SELECTOR, "tr.job-row a")
        seen += [str(link.get_attribute("href")).rsplit("/", 1)[1] for link in links]
        ui.screenshot(tmp_path, f"jobs-page-{len(seen)}")
        nexts = ui.driver.find_elements(By.ID, "next-page")
        if not nexts:
            break
        nexts[0].click()
    assert seen == [str(i) for i in reversed(made)]  # newest first, each once, 50 then 7

    # The search box opens a job by its id.
    box = ui.driver.find_element(By.CSS_SELECTOR, "form.search input")
    box.send_keys(str(made[3]) + "\n")
    until(lambda: ui.driver.current_url.endswith(f"/ui/jobs/{made[3]}"), what="the job page")
    assert '"i": 3' in ui.text("main")


def test_a_running_jobs_bar_moves_without_a_reload_and_cancel_ends_it_cancelled(ui: World, tmp_path: Path) -> None:
    job = ui.api.store.enqueue(NewJob(kind="sleep", payload={"seconds": 30}))
    ui.open(f"/ui/jobs/{job.id}")
    ui.driver.execute_script("window.__sameDocument = true;")  # gone if the page reloads
    until(lambda: ui.text("#state") == "running", 20, "the job to run")

    def width() -> float:
        return float(ui.driver.execute_script("return parseFloat(document.getElementById('bar').style.width) || 0"))

    first = until(width, 10, "some progress")
    until(lambda: width() > first, 10, "the bar to move")
    assert ui.driver.execute_script("return window.__sameDocument === true"), "the page reloaded"
    ui.screenshot(tmp_path, "job-running")

    ui.driver.find_element(By.ID, "cancel").click()
    assert "Cancel job" in ui.accept_confirmation()
    until(lambda: ui.text("#state") == "cancelled", 20, "the job to end cancelled")
    assert ui.db.one("SELECT state FROM jobs WHERE id = %(id)s", id=job.id)["state"] == "cancelled"
    assert [a["outcome"] for a in ui.db.attempts(job.id)] == ["cancelled"]
    assert "Attempt 1 cancelled" in ui.text("ol.timeline")
    ui.screenshot(tmp_path, "job-cancelled")


def test_replaying_a_failure_group_queues_its_jobs_again_and_records_the_replay(ui: World, tmp_path: Path) -> None:
    store = ui.api.store
    failed = []
    for n in (7, 19, 23):
        _park(ui, kind="ocr", max_attempts=1)
        [claimed] = store.claim("seeder", [PARKED], 1, 30, kinds=["ocr"])
        store.fail(claimed.lease, f"OSError: disk {n} full", GiveUp())
        failed.append(claimed.id)
    ui.open("/ui/failures")
    row = next(r for r in ui.driver.find_elements(By.CSS_SELECTOR, "tr.group") if r.text.startswith("ocr"))
    assert "OSError: disk N full" in row.text and " 3 " in f" {row.text} "
    row.find_element(By.CSS_SELECTOR, "a.replay-group").click()
    assert ui.text("#replay-count") == "3"  # the dry run says how many, before anything changes
    assert ui.db.count("job_replays") == 0
    ui.screenshot(tmp_path, "replay-dry-run")

    ui.driver.find_element(By.ID, "confirm-replay").click()
    assert "Replay 3 job(s)?" in ui.accept_confirmation()
    until(lambda: "Replayed 3 job(s)" in ui.text("main"), what="the replay's notice")
    rows = ui.db.rows("SELECT job_id, replayed_by, previous_state FROM job_replays ORDER BY job_id")
    assert [(r["job_id"], r["replayed_by"], r["previous_state"]) for r in rows] == [
        (str(i), "console:alice", "failed") for i in sorted(failed, key=str)
    ]
    states = {r["state"] for r in ui.db.rows("SELECT state FROM jobs WHERE kind = 'ocr'")}
    assert states == {"queued"}
    ui.screenshot(tmp_path, "replayed")


def test_a_failed_jobs_replay_button_asks_first_and_a_no_changes_nothing(ui: World, tmp_path: Path) -> None:
    _park(ui, kind="resize", max_attempts=1)
    [claimed] = ui.api.store.claim("seeder", [PARKED], 1, 30, kinds=["resize"])
    ui.api.store.fail(claimed.lease, "KeyError: 'width'", GiveUp())
    ui.open(f"/ui/jobs/{claimed.id}")
    assert ui.driver.find_elements(By.ID, "cancel") == []  # a failed job can be replayed, not cancelled

    ui.driver.find_element(By.ID, "replay").click()
    ui.driver.switch_to.alert.dismiss()
    time.sleep(0.5)  # had the form been sent, its redirect would be back by now
    assert ui.db.one("SELECT state FROM jobs WHERE id = %(id)s", id=claimed.id)["state"] == "failed"
    assert ui.db.count("job_replays", "job_id = %(id)s", id=claimed.id) == 0

    ui.driver.find_element(By.ID, "replay").click()
    assert "Replay job" in ui.accept_confirmation()
    until(lambda: "queued again" in ui.text("main"), what="the replay's notice")
    assert ui.text("#state") == "queued"
    assert ui.db.count("job_replays", "job_id = %(id)s", id=claimed.id) == 1
    ui.screenshot(tmp_path, "job-replayed")


def test_a_post_without_the_csrf_token_is_refused(ui: World, tmp_path: Path) -> None:
    job = _park(ui)
    ui.open(f"/ui/jobs/{job.id}")
    status = ui.driver.execute_async_script(
        """const done = arguments[arguments.length - 1];
           fetch(arguments[0], {method: 'POST', credentials: 'same-origin',
                                headers: {'Content-Type': 'application/x-www-form-urlencoded'}, body: ''})
             .then((r) => done(r.status));""",
        f"/ui/jobs/{job.id}/cancel",
    )
    assert status == 403
    assert ui.db.one("SELECT state FROM jobs WHERE id = %(id)s", id=job.id)["state"] == "queued"
    ui.console_errors()  # the browser logs the 403 it was given: expected, drained
    ui.open(f"/ui/jobs/{job.id}")
    assert ui.text("#state") == "queued"
    ui.screenshot(tmp_path, "csrf-refused-job-still-queued")


# Every element inside its parent's box (left and right), and the page no wider than the window:
# nothing clipped, nothing hidden behind a scroll bar. Children of a closed <details> and of an
# SVG chart are not boxes of their own.
OVERFLOWS = """
const found = [];
for (const el of document.querySelectorAll("body *")) {
  if ((el.closest("svg") && el.tagName.toLowerCase() !== "svg") || el.closest("[hidden]")) continue;
  const box = el.getBoundingClientRect();
  if (box.width === 0 && box.height === 0) continue;
  const parent = el.parentElement.getBoundingClientRect();
  if (box.right > parent.right + 1 || box.left < parent.left - 1) {
    const name = el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") + (el.className && typeof el.className === "string" ? "." + el.className.trim().split(/\\s+/).join(".") : "");
    found.push(`${name} [${Math.round(box.left)}, ${Math.round(box.right)}] outside its ${el.parentElement.tagName.toLowerCase()} [${Math.round(parent.left)}, ${Math.round(parent.right)}]: ${el.textContent.trim().slice(0, 40)}`);
  }
}
const page = document.documentElement;
if (page.scrollWidth > page.clientWidth) found.push(`the page is ${page.scrollWidth - page.clientWidth} px wider than the window`);
return found;
"""


def _long_world(ui: World) -> dict[str, str]:
    """Jobs, failures, items and a schedule with long names, errors and tracebacks: what a page
    must fit. Made once per module (the layout test runs at three widths)."""
    store = ui.api.store
    made = getattr(ui, "long_world", None)
    if made:
        return made
    kind = "nightly-report-for-every-tenant-of-the-largest-region"
    traceback = "\n".join(
        ["Traceback (most recent call last):"]
        + [f'  File "/srv/app/handlers/very/deeply/nested/module_{n}.py", line {n}, in step' for n in range(12)]
        + ["ValueError: " + "the-upstream-service-answered-with-a-very-long-message-" * 4]
    )
    job = _park(ui, kind=kind, total=3, tenant="tenant-with-a-rather-long-name-for-testing", max_attempts=1)
    [claimed] = store.claim("seeder-with-a-long-worker-id-on-host-42", [PARKED], 1, 30, kinds=[kind])
    from service.jobs import ItemOutcome, ItemState

    store.heartbeat(
        claimed.lease,
        30,
        done=3,
        items=[
            ItemOutcome(0, ItemState.OK),
            ItemOutcome(1, ItemState.FAILED, error=traceback),
            ItemOutcome(2, ItemState.OK),
        ],
    )
    store.fail(claimed.lease, traceback, GiveUp())
    store.save_schedule(
        ScheduleSpec(
            name="nightly-report-for-every-tenant",
            cron="30 2 * * *",
            kind=kind,
            queue=PARKED,
            timezone="America/Argentina/Buenos_Aires",
        ),
        datetime(2031, 1, 2, 5, 30, tzinfo=UTC),
    )
    store.set_limit(Limit(f"kind:{kind}", concurrency=1000, rate=1000, per_seconds=86_400.0))
    store.set_limit(Limit("tenant:tenant-with-a-rather-long-name-for-testing", weight=12.5))
    made = {
        "overview": "/ui",
        "jobs": "/ui/jobs",
        "job": f"/ui/jobs/{job.id}",
        "failed-items": f"/ui/jobs/{job.id}?items=failed",
        "failures": "/ui/failures",
        "replay": "/ui/failures/replay?" + urlencode({"kind": kind, "group": "x", "since": "24h"}),
        "schedules": "/ui/schedules",
        "workers": "/ui/workers",
        "ambiguous": "/ui/jobs?id=0",
        "search": "/ui/jobs?"
        + urlencode(
            {
                "kind": kind,
                "tenant": "tenant-with-a-rather-long-name-for-testing",
                "error": "the-upstream-service-answered-with-a-very-long-message-",
                "created_after": "2000-01-01T00:00:00Z",
            }
        ),
        "limits": "/ui/limits?" + urlencode({"scope": f"kind:{kind}"}),
        "stats": "/ui/stats",
        "stats-7d": "/ui/stats?range=7d&by=kind",
        "problem": "/ui/nowhere",
    }
    ui.long_world = made  # type: ignore[attr-defined]
    return made


@pytest.mark.parametrize("width", [390, 1280, 1920])
def test_no_element_overflows_its_container_at_any_width(ui: World, tmp_path: Path, width: int) -> None:
    pages = _long_world(ui)
    ui.driver.set_window_size(width, 900)
    for name, path in pages.items():
        ui.open(path)
        until(lambda: ui.driver.execute_script("return document.readyState") == "complete", what="the page")
        for details in ui.driver.find_elements(By.CSS_SELECTOR, "details"):
            ui.driver.execute_script("arguments[0].open = true", details)  # the whole traceback must fit too
        overflows = ui.driver.execute_script(OVERFLOWS)
        ui.screenshot(tmp_path, f"{name}-{width}")
        assert overflows == [], f"{path} at {width} px: {overflows[:5]}"
        if name == "workers":
            assert ui.worker.worker_id in ui.text("main")  # the workers page names the live worker
    ui.console_errors()  # the problem page's 404 and the ambiguous page's 300: expected, drained


def test_the_console_follows_the_systems_dark_mode(ui: World, tmp_path: Path) -> None:
    def background() -> str:
        return str(ui.driver.execute_script("return getComputedStyle(document.body).backgroundColor"))

    ui.open("/ui")
    light = background()
    ui.driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
    )
    try:
        dark = background()
        levels = [int(n) for n in re.findall(r"\d+", dark)[:3]]
        assert dark != light and max(levels) < 60, dark
        ui.screenshot(tmp_path, "overview-dark")
    finally:
        ui.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


@pytest.mark.parametrize(("page", "rendered"), [("/docs", ".opblock"), ("/redoc", "[data-section-id]")])
def test_the_api_docs_load_every_asset_from_jobq_and_nothing_from_elsewhere(
    world: World, tmp_path: Path, page: str, rendered: str
) -> None:
    """Offline, a request to another host fails (a logged error, a broken image); online, it tells that
    host which API someone is reading. Reached by a name other than 127.0.0.1, as a deployed jobq is."""
    port = urlparse(world.api.url).port
    world.requested_urls()  # drain what came before
    world.console_errors()
    world.driver.get(f"http://{SERVER_NAME}:{port}{page}")
    until(lambda: len(world.driver.find_elements(By.CSS_SELECTOR, rendered)) > 5, 20, f"{page} to render the API")
    time.sleep(1)  # images and late requests of the rendered page
    urls = world.requested_urls()
    assert f"http://{SERVER_NAME}:{port}/openapi.json" in urls
    elsewhere = [url for url in urls if urlparse(url).netloc != f"{SERVER_NAME}:{port}"]
    assert elsewhere == [], f"{page} asked another host for {elsewhere}"
    assert world.console_errors() == []
    world.screenshot(tmp_path, page.strip("/"))


def test_a_job_opens_by_the_start_of_its_id_and_shows_its_failed_items(ui: World, tmp_path: Path) -> None:
    from service.jobs import ItemOutcome, ItemState

    store = ui.api.store
    job = _park(ui, kind="items", total=12)
    [claimed] = store.claim("seeder", [PARKED], 1, 30, kinds=["items"])
    outcomes = [
        ItemOutcome(i, ItemState.FAILED, error=f"ValueError: row {i}") if i == 5 else ItemOutcome(i, ItemState.OK)
        for i in range(12)
    ]
    store.heartbeat(claimed.lease, 30, done=12, items=outcomes)
    store.complete(claimed.lease, None)
    ui.open("/ui")
    box = ui.driver.find_element(By.CSS_SELECTOR, "form.search input")
    box.send_keys(str(job.id)[:-6] + "\n")  # unique: nothing else was made in this microsecond window
    until(lambda: ui.driver.current_url.endswith(f"/ui/jobs/{job.id}"), what="the job page")
    assert ui.text("h1 .id") == str(job.id)
    assert "11 ok" in ui.text("#items h2") and "1 failed" in ui.text("#items h2")
    assert "Error" not in [h.text for h in ui.driver.find_elements(By.CSS_SELECTOR, "h2")]
    ui.driver.find_element(By.ID, "failed-items").click()
    until(lambda: "items=failed" in ui.driver.current_url, what="the failed items")
    rows = ui.driver.find_elements(By.CSS_SELECTOR, "tr.item-row")
    assert [r.get_attribute("data-item") for r in rows] == ["5"] and "ValueError: row 5" in rows[0].text
    ui.screenshot(tmp_path, "failed-items")


def test_a_page_whose_session_ended_says_so_and_offers_the_login(ui: World, tmp_path: Path) -> None:
    job = _park(ui, kind="watched")
    ui.open(f"/ui/jobs/{job.id}")
    until(lambda: ui.driver.execute_script("return document.readyState") == "complete", what="the page")
    ui.db.execute("DELETE FROM console_sessions")  # as a logout elsewhere or a revoked token would
    ui.api.store.claim("seeder", [PARKED], 1, 60, kinds=["watched"])  # the long poll answers; the next finds no session
    banner = until(lambda: ui.text("#session-lost"), 20, "the page to notice the lost session")
    assert "Your session has ended" in banner
    link = ui.driver.find_element(By.CSS_SELECTOR, "#session-lost a")
    assert link.get_attribute("href").endswith("/ui/login?next=" + f"%2Fui%2Fjobs%2F{job.id}")
    ui.screenshot(tmp_path, "session-lost")
    ui.console_errors()  # the 401 the browser was given: expected, drained
    link.click()
    until(lambda: ui.driver.find_elements(By.ID, "token"), what="the login form")
    ui.driver.find_element(By.ID, "token").send_keys(ui.token)
    ui.driver.find_element(By.CSS_SELECTOR, "form.login button").click()
    until(lambda: ui.driver.current_url.endswith(f"/ui/jobs/{job.id}"), what="the job page again")
    assert ui.text("#state") == "running"
    ui.api.store.cancel(job.id)


def test_lists_refresh_themselves_without_a_reload_keeping_their_filters(ui: World, tmp_path: Path) -> None:
    store = ui.api.store
    job = _park(ui, kind="live-list")
    _park(ui, kind="live-other")
    ui.driver.execute_script("localStorage.setItem('jobq-live', 'on')")
    ui.open(f"/ui/jobs?kind=live-list&queue={PARKED}")
    ui.driver.execute_script("window.__sameDocument = true;")  # gone if the page reloads
    assert ui.driver.find_element(By.ID, "live-toggle").is_selected()

    def state_shown() -> str:
        return ui.text(f'tr.job-row a[href="/ui/jobs/{job.id}"]') and ui.text("tr.job-row .state")

    assert state_shown() == "queued"
    [claimed] = store.claim("elsewhere", [PARKED], 1, 30, kinds=["live-list"])  # another host runs it
    store.complete(claimed.lease, {"done": True})
    until(lambda: state_shown() == "succeeded", 20, "the finished job to appear")
    assert ui.driver.execute_script("return window.__sameDocument === true"), "the page reloaded"
    assert ui.driver.find_element(By.NAME, "kind").get_attribute("value") == "live-list"  # the filters kept
    assert "live-other" not in ui.text("table.jobs")
    ui.screenshot(tmp_path, "jobs-live")

    # The overview too: a job finishing elsewhere moves its counts.
    ui.open("/ui")
    ui.driver.execute_script("window.__sameDocument = true;")
    before = int(ui.text("#total-succeeded"))
    _park(ui, kind="live-count")
    [claimed] = store.claim("elsewhere", [PARKED], 1, 30, kinds=["live-count"])
    store.complete(claimed.lease, None)
    until(lambda: ui.text("#total-succeeded") == str(before + 1), 20, "the overview's count to move")
    assert ui.driver.execute_script("return window.__sameDocument === true"), "the page reloaded"

    # Off with the toggle: nothing moves any more.
    ui.driver.find_element(By.ID, "live-toggle").click()
    assert ui.driver.execute_script("return localStorage.getItem('jobq-live')") == "off"
    _park(ui, kind="live-count")
    [claimed] = store.claim("elsewhere", [PARKED], 1, 30, kinds=["live-count"])
    store.complete(claimed.lease, None)
    time.sleep(7)  # longer than a refresh's interval
    assert ui.text("#total-succeeded") == str(before + 1)
    ui.driver.execute_script("localStorage.setItem('jobq-live', 'off')")


def test_a_bulk_cancel_of_a_filtered_set_shows_its_dry_run_first_and_lands_in_the_audit(
    ui: World, tmp_path: Path
) -> None:
    doomed = [_park(ui, kind="bulk-browser").id for _ in range(3)]
    kept = _park(ui, kind="bulk-kept").id
    ui.open(f"/ui/jobs?kind=bulk-browser&queue={PARKED}")
    ui.driver.find_element(By.ID, "bulk-cancel").click()
    until(lambda: ui.text("#bulk-count") == "3", what="the dry run's count")
    assert ui.db.count("jobs", "kind = 'bulk-browser' AND state = 'queued'") == 3  # nothing changed yet
    ui.screenshot(tmp_path, "bulk-dry-run")
    ui.driver.find_element(By.ID, "confirm-bulk").click()
    assert "Cancel 3 job(s)?" in ui.accept_confirmation()
    until(lambda: "Cancelled 3 job(s)" in ui.text("#notice"), what="the bulk cancel's notice")
    assert "kind=bulk-browser" in ui.driver.current_url  # back on the filtered list
    states = {r["state"] for r in ui.db.rows("SELECT state FROM jobs WHERE kind = 'bulk-browser'")}
    assert states == {"cancelled"} and len(doomed) == 3
    assert ui.db.one("SELECT state FROM jobs WHERE id = %(id)s", id=kept)["state"] == "queued"

    ui.driver.find_element(By.LINK_TEXT, "Audit").click()
    until(lambda: "/ui/audit" in ui.driver.current_url, what="the audit page")
    row = ui.driver.find_element(By.CSS_SELECTOR, 'tr.audit-row[data-action="bulk-cancel"]')
    assert "alice" in row.text and " 3 " in f" {row.text} " and "kind=bulk-browser" in row.text
    ui.screenshot(tmp_path, "audit")


def test_a_queue_paused_from_the_console_stops_its_claims_until_resumed(ui: World, tmp_path: Path) -> None:
    ui.open("/ui")
    row = ui.driver.find_element(By.CSS_SELECTOR, 'tr[data-queue="default"]')
    row.find_element(By.CSS_SELECTOR, "button.pause").click()
    assert "Pause queue default?" in ui.accept_confirmation()
    try:
        until(lambda: "Paused" in ui.text("#notice"), what="the pause's notice")
        job = ui.api.store.enqueue(NewJob(kind="sleep", payload={"seconds": 0}))
        time.sleep(4)  # the worker polls and claims within a second or two when it may
        assert ui.db.one("SELECT state FROM jobs WHERE id = %(id)s", id=job.id)["state"] == "queued"
        ui.screenshot(tmp_path, "queue-paused")
    finally:
        ui.open("/ui")
        ui.driver.find_element(By.CSS_SELECTOR, 'tr[data-queue="default"] button.resume').click()
        ui.accept_confirmation()
        until(lambda: "Resumed" in ui.text("#notice"), what="the resume's notice")
    until(
        lambda: ui.db.one("SELECT state FROM jobs WHERE id = %(id)s", id=job.id)["state"] == "succeeded",
        20,
        "the job to run once the queue is resumed",
    )
    actions = [
        r["action"] for r in ui.db.rows("SELECT action FROM console_audit WHERE target = 'queue:default' ORDER BY id")
    ]
    assert actions[-2:] == ["scope-pause", "scope-resume"]


def test_a_schedule_run_now_queues_its_job_at_once(ui: World, tmp_path: Path) -> None:
    ui.api.store.save_schedule(
        ScheduleSpec(name="browser-run-now", cron="0 3 1 1 *", kind="sleep", payload={"seconds": 0}),
        datetime(2031, 1, 1, 3, tzinfo=UTC),
    )
    ui.open("/ui/schedules")
    ui.driver.find_element(By.CSS_SELECTOR, 'tr[data-schedule="browser-run-now"] button.run-now').click()
    assert "Run schedule browser-run-now now" in ui.accept_confirmation()
    until(lambda: "/ui/jobs/" in ui.driver.current_url, what="the new job's page")
    job_id = ui.driver.current_url.rsplit("/", 1)[1]
    # (Its notice may be gone already: the worker can finish the job before the page's first poll,
    # which then reloads the page once.)
    until(lambda: ui.text("#state") == "succeeded", 20, "the schedule's job to run")
    entry = ui.db.one(
        "SELECT action, target, detail FROM console_audit WHERE action = 'schedule-run-now' ORDER BY id DESC LIMIT 1"
    )
    assert entry["target"] == "schedule:browser-run-now" and json.loads(entry["detail"]) == {"job_id": job_id}
    ui.screenshot(tmp_path, "schedule-run-now")


def _search(ui: World, **fields: str) -> list[str]:
    """Fill the jobs page's search form (a fresh one: every other field empty) and submit it;
    the ids of the rows it lists."""
    ui.open("/ui/jobs")
    form = ui.driver.find_element(By.CSS_SELECTOR, "form.filters")
    for name, value in fields.items():
        field = form.find_element(By.NAME, name)
        if field.tag_name == "select":
            field.find_element(By.CSS_SELECTOR, f'option[value="{value}"]').click()
        else:
            field.send_keys(value)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    until(lambda: "/ui/jobs?" in ui.driver.current_url, what="the search's results")
    return _listed(ui)


def _listed(ui: World) -> list[str]:
    return [
        str(a.get_attribute("href")).rsplit("/", 1)[1] for a in ui.driver.find_elements(By.CSS_SELECTOR, "tr.job-row a")
    ]


def test_the_job_search_finds_jobs_by_each_filter(ui: World, tmp_path: Path) -> None:
    store = ui.api.store
    before = datetime.now(UTC)
    time.sleep(0.05)
    plain = str(_park(ui, kind="search-kind", tenant="search-tenant", idempotency_key="search-order-1").id)
    keyed = str(_park(ui, kind="search-other", concurrency_key="search-customer-7").id)
    failed = str(_park(ui, kind="search-fails", max_attempts=1).id)
    [claimed] = store.claim("seeder", [PARKED], 1, 30, kinds=["search-fails"])
    store.fail(claimed.lease, "ConnectionResetError: the search-upstream hung up", GiveUp())
    time.sleep(0.05)
    after = datetime.now(UTC)
    stamp = "%Y-%m-%dT%H:%M:%S.%fZ"

    assert _search(ui, kind="search-kind") == [plain]
    assert _search(ui, tenant="search-tenant") == [plain]
    assert _search(ui, idempotency_key="search-order-1") == [plain]
    assert _search(ui, concurrency_key="search-customer-7") == [keyed]
    assert _search(ui, error="SEARCH-UPSTREAM hung") == [failed]
    assert _search(ui, state="failed", queue=PARKED, error="search-upstream") == [failed]
    ui.screenshot(tmp_path, "search-error")
    assert ui.text("#match-count").startswith("1 matching")
    window = {"created_after": before.strftime(stamp), "created_before": after.strftime(stamp), "queue": PARKED}
    assert _search(ui, **window) == [failed, keyed, plain]
    assert _search(ui, created_before=before.strftime(stamp), kind="search-kind") == []
    assert "No job matches" in ui.text("table.jobs") and ui.text("#match-count").startswith("0 matching")
    ui.screenshot(tmp_path, "search-time-range")

    ui.open("/ui/jobs?created_before=yesterday")  # a bad value: said on the page, nothing listed
    assert "created before" in ui.text(".error") or "before:" in ui.text(".error")
    ui.console_errors()  # the 422 is logged by the browser: expected, drained


def test_previous_and_next_pages_keep_the_search(ui: World, tmp_path: Path) -> None:
    made = [str(_park(ui, kind="pager", concurrency_key="pager-key").id) for _ in range(53)][::-1]
    _park(ui, kind="pager")  # no key: never listed
    assert _search(ui, kind="pager", concurrency_key="pager-key") == made[:50]
    assert ui.text("#match-count").startswith("53 matching")
    ui.driver.find_element(By.ID, "next-page").click()
    until(lambda: "after=" in ui.driver.current_url, what="the next page")
    assert _listed(ui) == made[50:]
    assert ui.driver.find_element(By.NAME, "concurrency_key").get_attribute("value") == "pager-key"
    ui.screenshot(tmp_path, "search-next")
    ui.driver.find_element(By.ID, "prev-page").click()
    until(lambda: "before=" in ui.driver.current_url, what="the previous page")
    assert _listed(ui) == made[:50]
    assert "kind=pager" in ui.driver.current_url and "concurrency_key=pager-key" in ui.driver.current_url
    assert not ui.driver.find_elements(By.ID, "prev-page")  # the newest page: nothing before it
    ui.screenshot(tmp_path, "search-previous")


def test_the_stats_page_draws_its_charts_for_each_range(ui: World, tmp_path: Path) -> None:
    store = ui.api.store
    for ok in (True, True, False):
        _park(ui, kind="charted", max_attempts=1)
        [claimed] = store.claim("seeder", [PARKED], 1, 30, kinds=["charted"])
        store.complete(claimed.lease, None) if ok else store.fail(claimed.lease, "ValueError: charted", GiveUp())
    # The leader folds the rollup a minute after a finish; fold now, settled or not, for the 7 d view.
    from service.maintenance.rollup import BUCKET_BOUNDS, BUCKET_SECONDS

    store.fold_rollup(BUCKET_BOUNDS, BUCKET_SECONDS, 0.0, 10_000)
    ui.open("/ui/stats")
    for span in ("1h", "24h", "7d"):
        for by, name in (("queue", PARKED), ("kind", "charted")):
            if f"range={span}" not in ui.driver.current_url:
                ui.driver.find_element(By.CSS_SELECTOR, f'nav.selector a[data-range="{span}"]').click()
                until(lambda span=span: f"range={span}" in ui.driver.current_url, what=f"the {span} range")
            if f"by={by}" not in ui.driver.current_url:
                ui.driver.find_element(By.CSS_SELECTOR, f'nav.selector a[data-by="{by}"]').click()
                until(lambda by=by: f"by={by}" in ui.driver.current_url, what=f"the stats per {by}")
            row = ui.driver.find_element(By.CSS_SELECTOR, f'tr.stats-row[data-name="{name}"]')
            charts = row.find_elements(By.CSS_SELECTOR, "svg.chart")
            assert [c.get_attribute("data-chart") for c in charts] == ["throughput", "failure-ratio", "wait", "run"]
            for chart in charts:  # each draws at least one bar of some height
                heights = [float(r.get_attribute("height")) for r in chart.find_elements(By.CSS_SELECTOR, "rect")]
                assert len(heights) >= 2 and max(heights[1:]) > 0, (span, by, chart.get_attribute("data-chart"))
            assert row.find_element(By.CSS_SELECTOR, '[data-col="failure-ratio"]').text.endswith("%")
        ui.screenshot(tmp_path, f"stats-{span}")


def test_a_limit_is_set_edited_and_deleted_through_the_browser(ui: World, tmp_path: Path) -> None:
    store = ui.api.store
    ui.open("/ui")
    ui.driver.find_element(By.LINK_TEXT, "Limits").click()
    until(lambda: ui.driver.current_url.endswith("/ui/limits"), what="the limits page")
    form = ui.driver.find_element(By.ID, "limit-form")
    form.find_element(By.NAME, "scope").send_keys("kind:browser-limited")
    form.find_element(By.NAME, "concurrency").send_keys("2")
    form.find_element(By.NAME, "rate").send_keys("5/s")
    form.find_element(By.ID, "save-limit").click()
    assert "Set this limit?" in ui.accept_confirmation()
    until(lambda: "The limit is set" in ui.text("#notice"), what="the limit's notice")
    row = ui.driver.find_element(By.CSS_SELECTOR, 'tr.limit-row[data-scope="kind:browser-limited"]')
    assert row.find_element(By.CSS_SELECTOR, '[data-col="rate"]').text == "5/s"
    ui.screenshot(tmp_path, "limit-set")

    row.find_element(By.CSS_SELECTOR, "a.edit").click()
    until(lambda: "scope=kind" in ui.driver.current_url, what="the edit form")
    field = ui.driver.find_element(By.CSS_SELECTOR, "#limit-form [name=concurrency]")
    assert field.get_attribute("value") == "2"
    field.clear()
    field.send_keys("4")
    ui.driver.find_element(By.ID, "save-limit").click()
    ui.accept_confirmation()
    until(lambda: "The limit is set" in ui.text("#notice"), what="the edit's notice")
    [limit] = [lim for lim in store.list_limits() if lim.scope == "kind:browser-limited"]
    assert (limit.concurrency, limit.rate_text) == (4, "5/s")

    form = ui.driver.find_element(By.ID, "limit-form")  # after a save: an empty form for a new limit
    form.find_element(By.NAME, "scope").send_keys("kind:browser-limited")
    form.find_element(By.NAME, "concurrency").send_keys("4x")  # refused: not a whole number
    form.find_element(By.ID, "save-limit").click()
    ui.accept_confirmation()
    until(lambda: "concurrency must be a whole number" in ui.text("#problem-detail"), what="the refusal")
    assert "Nothing was changed" in ui.text("#problem-detail")
    assert [(lim.concurrency, lim.rate_text) for lim in store.list_limits() if lim.scope == limit.scope] == [(4, "5/s")]
    ui.console_errors()  # the 422 is logged by the browser: expected, drained
    ui.driver.find_element(By.ID, "problem-back").click()

    until(lambda: ui.driver.current_url.endswith("/ui/limits"), what="the limits page again")
    row = ui.driver.find_element(By.CSS_SELECTOR, 'tr.limit-row[data-scope="kind:browser-limited"]')
    row.find_element(By.CSS_SELECTOR, "button.delete").click()
    assert "Remove the limit on kind:browser-limited?" in ui.accept_confirmation()
    until(lambda: "The limit is removed" in ui.text("#notice"), what="the removal's notice")
    assert all(lim.scope != "kind:browser-limited" for lim in store.list_limits())
    actions = ui.db.rows("SELECT action FROM console_audit WHERE target = 'kind:browser-limited' ORDER BY id")
    assert [a["action"] for a in actions] == ["limit-set", "limit-set", "limit-delete"]
    ui.screenshot(tmp_path, "limit-deleted")
