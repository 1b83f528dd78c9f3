"""Workflows over HTTP: depends_on in POST /v1/jobs and the batch (by id or {"index": N}),
the status's parent counts, GET /v1/jobs/{job_id}/dependencies, and the refusals."""

from __future__ import annotations

from service.store import Store
from tests.api.conftest import LiveApi
from tests.api.problems import assert_problem
from tests.conftest import Database


def test_a_graph_in_one_batch_by_position_waits_for_its_parents(api: LiveApi, owner_store: Store) -> None:
    http = api.http(api.token())
    response = http.post(
        "/v1/jobs/batch",
        json={
            "jobs": [
                {"kind": "split"},
                {"kind": "classify", "depends_on": [{"index": 0}]},
                {"kind": "classify", "depends_on": [{"index": 0}]},
                {"kind": "summarise", "depends_on": [{"index": 1}, {"index": 2}], "on_parent_failure": "run"},
            ]
        },
    )
    assert response.status_code == 202, response.text
    split, left, right, last = response.json()["jobs"]
    assert [j["parents_total"] for j in (split, left, right, last)] == [0, 1, 1, 2]
    assert last["parents_pending"] == 2 and last["state"] == "queued" and last["run_after"] is None

    deps = http.get(f"/v1/jobs/{split['job_id']}/dependencies").json()
    assert {c["job_id"] for c in deps["children"]} == {left["job_id"], right["job_id"]}
    assert deps["parents"] == [] and deps["children_after"] is None
    up = http.get(f"/v1/jobs/{last['job_id']}/dependencies").json()
    assert {p["job_id"] for p in up["parents"]} == {left["job_id"], right["job_id"]}
    assert up["parents"][0]["url"] == f"/v1/jobs/{up['parents'][0]['job_id']}"

    explained = http.get(f"/v1/jobs/{last['job_id']}/explain").json()
    assert explained["reasons"][0]["code"] == "waiting_for_parents"
    assert explained["summary"].startswith("waiting for 2 of 2 parents: ")
    assert left["job_id"] in explained["summary"] and right["job_id"] in explained["summary"]


def test_a_single_submit_names_its_parent_by_id(api: LiveApi, owner_store: Store) -> None:
    http = api.http(api.token())
    parent = http.post("/v1/jobs", json={"kind": "transcribe"}).json()
    child = http.post("/v1/jobs", json={"kind": "translate", "depends_on": [parent["job_id"]]})
    assert child.status_code == 202, child.text
    assert child.json()["parents_pending"] == 1
    owner_store.complete(owner_store.claim("w", ["default"], 5, 60)[0].lease, "text")
    assert http.get(child.headers["Location"]).json()["parents_pending"] == 0


def test_another_tenants_parent_is_the_same_404_as_a_missing_job(api: LiveApi, db: Database) -> None:
    theirs = api.http(api.token("other")).post("/v1/jobs", json={"kind": "x"}).json()["job_id"]
    http = api.http(api.token("acme"))
    refused = assert_problem(http.post("/v1/jobs", json={"kind": "y", "depends_on": [theirs]}), 404)
    missing = assert_problem(http.get(f"/v1/jobs/{theirs}"), 404)
    assert refused["type"] == missing["type"]
    assert_problem(http.get(f"/v1/jobs/{theirs}/dependencies"), 404)
    assert db.count("jobs") == 1


def test_a_position_that_is_not_earlier_is_refused_and_nothing_is_stored(api: LiveApi, db: Database) -> None:
    http = api.http(api.token())
    response = http.post("/v1/jobs/batch", json={"jobs": [{"kind": "a", "depends_on": [{"index": 1}]}, {"kind": "b"}]})
    problem = assert_problem(response, 422)
    assert "earlier jobs of its batch" in problem["detail"]
    assert db.count("jobs") == 0


def test_the_http_client_submits_parents_by_id_and_batch_position(api: LiveApi) -> None:
    from service.client import Client, JobSpec

    with Client(api.url, token=api.token()) as jobq:
        parent = jobq.submit("transcribe")
        child = jobq.submit("translate", depends_on=[parent.id], on_parent_failure="run")
        first, second = jobq.submit_many([JobSpec("a"), JobSpec("b", depends_on=(0, parent.id))])
    assert (api.store.get(child.id).parents_pending, api.store.get(second.id).parents_pending) == (1, 2)
    assert {p.id for p in api.store.dependencies(second.id).parents} == {first.id, parent.id}


def test_every_job_of_a_workflow_names_it_and_its_dependencies_count_the_workflow(
    api: LiveApi, owner_store: Store
) -> None:
    http = api.http(api.token())
    graph = http.post(
        "/v1/jobs/batch",
        json={"jobs": [{"kind": "split"}, {"kind": "classify", "depends_on": [{"index": 0}]}]},
    ).json()["jobs"]
    later = http.post("/v1/jobs", json={"kind": "publish", "depends_on": [graph[1]["job_id"]]}).json()
    alone = http.post("/v1/jobs", json={"kind": "other"}).json()

    root = graph[0]["job_id"]
    assert [j["workflow_id"] for j in (*graph, later)] == [root, root, root]
    assert http.get(f"/v1/jobs/{later['job_id']}").json()["workflow_id"] == root
    assert alone["workflow_id"] is None
    owner_store.complete(owner_store.claim("w", ["default"], 1, 60)[0].lease, "split")

    workflow = http.get(f"/v1/jobs/{later['job_id']}/dependencies").json()["workflow"]
    assert workflow == {
        "workflow_id": root,
        "total": 3,
        "done": 1,
        "queued": 2,
        "waiting": 1,
        "running": 0,
        "succeeded": 1,
        "failed": 0,
        "cancelled": 0,
    }
    assert http.get(f"/v1/jobs/{alone['job_id']}/dependencies").json()["workflow"] is None


def test_the_list_of_jobs_filters_one_workflow_and_never_shows_another_tenants(api: LiveApi) -> None:
    http = api.http(api.token())
    graph = http.post(
        "/v1/jobs/batch",
        json={"jobs": [{"kind": "split"}, *({"kind": "classify", "depends_on": [{"index": 0}]} for _ in range(3))]},
    ).json()["jobs"]
    http.post("/v1/jobs", json={"kind": "other"})
    root = graph[0]["job_id"]

    first = http.get("/v1/jobs", params={"workflow": root, "limit": 3}).json()
    rest = http.get("/v1/jobs", params={"workflow": root, "limit": 3, "cursor": first["next_cursor"]}).json()

    listed = [job["job_id"] for job in first["items"] + rest["items"]]
    assert listed == [job["job_id"] for job in reversed(graph)]  # newest first, across pages
    assert rest["next_cursor"] is None
    other_tenant = api.http(api.token(tenant="someone-else"))
    assert other_tenant.get("/v1/jobs", params={"workflow": root}).json()["items"] == []
    assert_problem(http.get("/v1/jobs", params={"workflow": "not-a-uuid"}), 422)
