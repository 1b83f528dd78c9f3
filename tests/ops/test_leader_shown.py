"""Who leads the fleet's maintenance, where operators look: ``jobq stats``, ``/metrics`` and
``/ui/workers`` (the lease itself is tests/store/test_leadership.py's)."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from service.jobs import WorkerInfo
from service.metrics import read_snapshot, render
from service.store import Store
from service.store.base import MAINTENANCE
from tests.api.conftest import LiveApi
from tests.console.conftest import admin_token
from tests.console.test_access import log_in
from tests.ops.conftest import Run
from tests.ops.test_metrics import scrape


def lead(store: Store, owner: str) -> int:
    lease, _ = store.acquire_leadership(MAINTENANCE, owner, 60)
    assert lease is not None
    return lease.term


def test_stats_names_the_leader_or_none(cli: Run, live: Store) -> None:
    assert "maintenance leader: none\n" in cli("stats").stdout
    assert json.loads(cli("stats", "--json").stdout)["leader"] is None

    term = lead(live, "host-1:4242:a")

    assert f"maintenance leader: host-1:4242:a (term {term})\n" in cli("stats").stdout
    assert json.loads(cli("stats", "--json").stdout)["leader"] == {"owner": "host-1:4242:a", "term": term}


def families(store: Store) -> dict[str, list[Sample]]:
    text = render(read_snapshot(store)).decode()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def test_metrics_show_the_leaders_term_and_id(live: Store) -> None:
    before = families(live)
    assert (before["jobq_leader_term"][0].value, before["jobq_leader_info"]) == (0, [])

    term = lead(live, "host-1:4242:a")

    after = families(live)
    assert after["jobq_leader_term"][0].value == term
    assert [(s.labels, s.value) for s in after["jobq_leader_info"]] == [({"owner": "host-1:4242:a"}, 1)]


def test_the_metrics_endpoint_serves_them(api: LiveApi) -> None:
    lead(api.store, "host-1:4242:a")
    assert scrape(api, None)["jobq_leader_info"][0].labels == {"owner": "host-1:4242:a"}


def test_the_workers_page_marks_the_leader(api: LiveApi) -> None:
    http = api.http()
    assert log_in(http, admin_token(api)).status_code == 303
    api.store.register_worker(WorkerInfo("host-1:4242:a", "host-1", 4242, ("default",), (), 1))
    assert "Maintenance leader: none now" in http.get("/ui/workers").text

    term = lead(api.store, "host-1:4242:a")

    page = http.get("/ui/workers").text
    assert f'Maintenance leader: <span class="mono">host-1:4242:a</span> (term {term},' in page
    assert '<span class="state running">leader</span>' in page
