"""``GET /v1/jobs/{id}/explain`` and ``jobq explain``: the same words, over HTTP and on the command line."""

from __future__ import annotations

import json

from service.jobs import WorkerInfo
from service.limits import Limit
from service.store import Store
from tests.api.conftest import LiveApi
from tests.api.problems import assert_problem
from tests.cli.test_cli import jobq


def test_explain_names_a_full_scope_and_a_kind_no_worker_handles(api: LiveApi, owner_store: Store, store_url, tmp_path):
    owner_store.register_worker(
        WorkerInfo(id="h:1:a", host="h", pid=1, queues=("default",), kinds=("x",), concurrency=2)
    )
    owner_store.set_limit(Limit("key:gpu", concurrency=1))
    http = api.http(api.token("acme"))
    running = http.post("/v1/jobs", json={"kind": "x", "payload": {}, "concurrency_key": "gpu"}).json()["job_id"]
    waiting = http.post("/v1/jobs", json={"kind": "x", "payload": {}, "concurrency_key": "gpu"}).json()["job_id"]
    typo = http.post("/v1/jobs", json={"kind": "xx", "payload": {}}).json()["job_id"]
    owner_store.claim("h:1:a", ["default"], 1, 60)

    body = http.get(f"/v1/jobs/{waiting}/explain").json()
    assert body["state"] == "queued" and [r["code"] for r in body["reasons"]] == ["scope_full"]
    assert body["reasons"][0]["details"]["running_job_ids"] == [running]
    assert "key:gpu is full (1 of 1 running)" in body["summary"]
    assert http.get(f"/v1/jobs/{typo}/explain").json()["reasons"][0]["code"] == "no_worker_for_kind"
    assert http.get(f"/v1/jobs/{running}/explain").json()["reasons"][0]["code"] == "running"
    assert_problem(api.http(api.token("other")).get(f"/v1/jobs/{waiting}/explain"), 404)

    shown = jobq("explain", typo, url=store_url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("queued: no live worker of queue 'default' handles its kind 'xx' (they handle: x)")
    fields = json.loads(jobq("explain", waiting, "--json", url=store_url, cwd=tmp_path).stdout)
    assert fields["reasons"][0]["details"]["running_job_ids"] == [running]
