"""Six weeks of synthetic history for PostgreSQL, generated in SQL (INSERT … SELECT).

What it writes, for ``jobs`` jobs spread over ``days`` days ending at ``end``:

- creation times denser around noon UTC than at night; ids are UUIDv7-shaped and
  time-ordered like the store's;
- eight kinds on five queues, each with its own run time (log-normal, capped),
  pickup delay (exponential, per queue) and failure rate, 60 tenants of very
  different sizes (a few big ones, a long tail), priorities, delayed jobs,
  progress totals, idempotency keys;
- terminal states for everything older than ten minutes: mostly succeeded,
  some failed (permanent errors after one attempt, retryable ones after all
  attempts, poison jobs whose every attempt ended by lease expiry), some
  cancelled (while queued, or while running); the last ten minutes queued or
  running;
- one attempt row per attempt (1–3) with worker, due, start, end, outcome and
  error; earlier attempts failed (retried) or were reclaimed (lease expired);
- a result row for every succeeded job; a replay record for a few jobs;
- an incident: for two days, four weeks ago, ``transcribe`` runs out of GPU memory.

Errors are tracebacks with numbers in them; their ``error_group`` is computed by
:func:`service.jobs.error_group`, as the store does. Every job's story is planned
once (two unlogged tables, half the jobs each), then written. Deterministic for
one ``end`` (``setseed``).

Not modelled: pre-replay attempts of replayed jobs, released attempts, dead
tuples and bloat from heartbeats (the load is as compact as a restore).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import psycopg

from service.jobs import error_group

KINDS = ["summarize", "embed", "transcribe", "translate", "ocr", "classify", "render_video", "export_report"]
QUEUES = ["llm", "cpu", "gpu", "llm", "cpu", "default", "gpu", "bulk"]
MODELS = ["llm-large", "embedder-v3", "whisper-xl", "llm-large", "ocr-v2", "clf-small", "render-v1", "reports"]
# Upper bounds of each kind's share of all jobs (width_bucket boundaries; the last kind takes the rest).
KIND_SHARES = [0.25, 0.45, 0.60, 0.72, 0.82, 0.92, 0.97]
RUN_MEDIAN_SECONDS = [40, 4, 180, 60, 20, 2, 600, 300]
PICKUP_MEAN_SECONDS = [5, 2, 30, 5, 2, 1, 30, 60]
FAILURE_RATE = [0.03, 0.01, 0.06, 0.03, 0.05, 0.01, 0.08, 0.04]
HAS_TOTAL = [False, False, True, False, True, False, True, False]
INCIDENT_KIND = KINDS.index("transcribe") + 1  # 1-based, as in SQL arrays

# The exception line of each error; {n} is filled with a number per job.
RETRYABLE_ERRORS = [
    "TimeoutError: upstream model did not answer within {n} s",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
    "httpx.HTTPStatusError: Server error '503 Service Unavailable' for url 'https://inference.internal/v1/run'",
    "RateLimitError: 429 Too Many Requests (retry after {n} s)",
]
ERRORS = RETRYABLE_ERRORS + [
    "KeyError: 'segment_{n}'",
    "ValueError: unsupported audio codec: opus at {n} kbit/s",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {n} MiB",
    "PermissionError: [Errno 13] Permission denied: '/data/inputs/{n}.bin'",
    "json.decoder.JSONDecodeError: Expecting value: line 1 column {n} (char {n})",
    "PermanentError: input document has {n} pages; the limit is 500",
    "FileNotFoundError: s3://inputs/{n}.bin does not exist",
]
OOM_ERROR = ERRORS.index("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {n} MiB") + 1
GROUPS = [error_group(e.replace("{n}", "7")) for e in ERRORS]
LEASE_EXPIRED_GROUP = error_group("lease expired")


# -- every job's story, one row per job ---------------------------------------------------
# Times are float seconds since the epoch until the rows are written (float arithmetic
# is cheap; timestamps and numerics are not). Each layer ends in OFFSET 0, so PostgreSQL
# computes it once per row instead of inlining it into the next layer and repeating each
# expression wherever it is used (and drawing a new random() in each place).
PLAN = """
CREATE UNLOGGED TABLE {table} AS
WITH draws AS (
    SELECT i,
           -- Busier around noon UTC: warp each whole day's time of day (monotone, so ids stay
           -- in time order); the first and last, partial, days stay uniform.
           CASE WHEN floor(t / 86400) * 86400 > %(end)s - %(span)s
                 AND floor(t / 86400) * 86400 + 86400 <= %(end)s
                THEN floor(t / 86400) * 86400 + 86400 * (tod + 0.6 * sin(2 * pi() * tod) / (2 * pi()))
                ELSE t END AS created,
           random() AS u_kind, random() AS u_tenant, random() AS u_state, random() AS u_attempts,
           random() AS u_poison, random() AS u_le1, random() AS u_le2, random() AS u_error,
           random() AS u_misc, random() AS u_replay,
           -ln(1 - random()) AS w1, -ln(1 - random()) AS w2, -ln(1 - random()) AS w3,
           sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random()) AS z1,
           sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random()) AS z2,
           sqrt(-2 * ln(1 - random())) * cos(2 * pi() * random()) AS z3,
           random() AS b1, random() AS b2
    FROM (SELECT i, t, (t - floor(t / 86400) * 86400) / 86400 AS tod
          FROM (SELECT i, %(end)s - %(span)s * (1 - (i - 0.5::float8) / %(jobs)s) AS t
                FROM generate_series(%(first)s::int, %(last)s::int) AS i) AS g) AS g
    OFFSET 0
),
decided AS (
    SELECT d.*,
           width_bucket(u_kind, %(kind_shares)s::float8[]) + 1 AS k,
           %(end)s - created AS age,
           CASE WHEN %(end)s - created < 600 THEN CASE WHEN u_state < 0.5 THEN 'queued' ELSE 'running' END
                WHEN u_state < 0.015 THEN 'cancelled'
                WHEN u_state < 0.015 + (%(failure_rate)s::float8[])[width_bucket(u_kind, %(kind_shares)s::float8[]) + 1]
                     + CASE WHEN width_bucket(u_kind, %(kind_shares)s::float8[]) + 1 = %(incident_kind)s
                             AND %(end)s - created BETWEEN 27 * 86400 AND 29 * 86400
                            THEN 0.3 ELSE 0 END THEN 'failed'
                ELSE 'succeeded' END AS state,
           CASE WHEN u_misc < 0.1 THEN 5 ELSE 3 END AS max_attempts
    FROM draws AS d
    OFFSET 0
),
counted AS (
    SELECT d.*,
           CASE state
               WHEN 'queued' THEN 0
               WHEN 'running' THEN 1
               WHEN 'cancelled' THEN CASE WHEN u_attempts < 0.5 THEN 0 ELSE 1 END
               WHEN 'failed' THEN CASE WHEN u_poison < 0.1 THEN 3 WHEN u_attempts < 0.4 THEN 1 ELSE 3 END
               ELSE CASE WHEN u_attempts < 0.9 THEN 1 WHEN u_attempts < 0.98 THEN 2 ELSE 3 END
           END AS attempts,
           (state = 'failed' AND u_poison < 0.1) AS poison,
           (state = 'failed' AND k = %(incident_kind)s AND age BETWEEN 27 * 86400 AND 29 * 86400) AS incident,
           -- Jobs younger than a few hours had less time: their whole story is scaled to fit.
           least(1.0, age / 15000) AS scale,
           CASE WHEN age > 15000 AND u_misc > 0.95 THEN (u_misc - 0.95) * 36000 ELSE 0 END AS delay,
           (%(run_median)s::float8[])[k] AS run_median,
           (%(pickup_mean)s::float8[])[k] AS pickup_mean
    FROM decided AS d
    OFFSET 0
),
attempted AS (
    -- How each attempt ended: earlier ones failed (and were retried) or were reclaimed.
    SELECT c.*,
           CASE WHEN attempts = 1 THEN final WHEN attempts > 1 THEN early1 END AS out1,
           CASE WHEN attempts = 2 THEN final WHEN attempts > 2 THEN early2 END AS out2,
           CASE WHEN attempts = 3 THEN final END AS out3
    FROM (SELECT c.*,
                 CASE WHEN poison OR u_le1 < 0.25 THEN 'lease_expired' ELSE 'failed' END AS early1,
                 CASE WHEN poison OR u_le2 < 0.25 THEN 'lease_expired' ELSE 'failed' END AS early2,
                 CASE state WHEN 'succeeded' THEN 'succeeded'
                            WHEN 'failed' THEN CASE WHEN poison THEN 'lease_expired' ELSE 'failed' END
                            WHEN 'cancelled' THEN 'cancelled' END AS final
          FROM counted AS c) AS c
    OFFSET 0
),
timed AS (
    -- Seconds: waits before pickup, run durations (log-normal, capped), backoffs.
    SELECT a.*,
           scale * pickup_mean * w1 AS wait1, scale * pickup_mean * w2 AS wait2, scale * pickup_mean * w3 AS wait3,
           scale * CASE out1 WHEN 'succeeded' THEN least(3000, run_median * exp(0.7 * z1))
                             WHEN 'failed' THEN 0.5 + 0.3 * least(3000, run_median * exp(0.7 * z1))
                             WHEN 'lease_expired' THEN 60 + 30 * u_le1 + 0.5 * least(3000, run_median * exp(0.7 * z1))
                             WHEN 'cancelled' THEN 0.5 * least(3000, run_median * exp(0.7 * z1))
                             ELSE 0 END AS dur1,
           scale * CASE out2 WHEN 'succeeded' THEN least(3000, run_median * exp(0.7 * z2))
                             WHEN 'failed' THEN 0.5 + 0.3 * least(3000, run_median * exp(0.7 * z2))
                             WHEN 'lease_expired' THEN 60 + 30 * u_le2 + 0.5 * least(3000, run_median * exp(0.7 * z2))
                             WHEN 'cancelled' THEN 0.5 * least(3000, run_median * exp(0.7 * z2))
                             ELSE 0 END AS dur2,
           scale * CASE out3 WHEN 'succeeded' THEN least(3000, run_median * exp(0.7 * z3))
                             WHEN 'failed' THEN 0.5 + 0.3 * least(3000, run_median * exp(0.7 * z3))
                             WHEN 'lease_expired' THEN 90 + 0.5 * least(3000, run_median * exp(0.7 * z3))
                             WHEN 'cancelled' THEN 0.5 * least(3000, run_median * exp(0.7 * z3))
                             ELSE 0 END AS dur3,
           scale * 10 * b1 AS backoff1, scale * 20 * b2 AS backoff2
    FROM attempted AS a
    OFFSET 0
)
SELECT i, k, (%(kinds)s::text[])[k] AS kind, (%(queues)s::text[])[k] AS queue,
       'tenant-' || lpad(floor(60 * power(u_tenant, 3))::int::text, 2, '0') AS tenant,
       state, attempts, max_attempts, poison, u_misc, u_error, u_replay,
       -- the UUIDv7 shape: 48 bits of milliseconds, version 7, variant, then the row number
       (lpad(to_hex((created * 1000)::bigint), 12, '0') || '7000' || '8000' || lpad(to_hex(i), 12, '0'))::uuid AS id,
       (lpad(to_hex((created * 1000)::bigint), 12, '0') || '7000' || '9000' || lpad(to_hex(i), 12, '0'))::uuid
           AS result_id,
       created, out1, out2, out3,
       created + delay AS due1,
       created + delay + wait1 AS start1,
       created + delay + wait1 + dur1 AS end1,
       created + delay + wait1 + dur1 + backoff1 AS due2,
       created + delay + wait1 + dur1 + backoff1 + wait2 AS start2,
       created + delay + wait1 + dur1 + backoff1 + wait2 + dur2 AS end2,
       created + delay + wait1 + dur1 + backoff1 + wait2 + dur2 + backoff2 AS due3,
       created + delay + wait1 + dur1 + backoff1 + wait2 + dur2 + backoff2 + wait3 AS start3,
       created + delay + wait1 + dur1 + backoff1 + wait2 + dur2 + backoff2 + wait3 + dur3 AS end3,
       CASE WHEN incident THEN %(oom_error)s
            ELSE 1 + (k * 3 + floor(power(u_error, 2) * %(error_count)s)::int) %% %(error_count)s END AS error_ix,
       1 + floor(u_misc * %(retryable_count)s)::int AS retry_error_ix
FROM timed
"""

# Text every row carries, from the row number: a worker name per attempt, the top of a traceback.
WORKER = "p.queue || '-' || lpad(((p.i * 7 + {salt}) %% 12)::text, 2, '0') || ':' || (4000 + p.i %% 50)"
TRACE_HEAD = (
    """'Traceback (most recent call last):' || chr(10) || '  File "/app/handlers/' || p.kind || '.py", line '"""
    " || (20 + p.i %% 380) || ', in run' || chr(10)"
)
FILLED = "replace((%(errors)s::text[])[{index}], '{{n}}', (p.i %% 997)::text)"

JOBS = f"""
INSERT INTO jobs (id, tenant, queue, kind, payload, state, priority, attempts, max_attempts, claims, done, total,
                  checkpoint, error, error_group, cancel_requested, lease_owner, lease_expires_at, run_after,
                  concurrency_key, idempotency_key, created_at, started_at, finished_at, updated_at, result_id)
SELECT id, tenant, queue, kind,
       jsonb_build_object('input', 's3://inputs/' || tenant || '/' || i || '.bin',
                          'model', (%(models)s::text[])[k], 'language', 'en'),
       state,
       CASE WHEN u_misc < 0.1 THEN 10 ELSE 0 END,
       attempts, max_attempts, attempts,
       CASE WHEN total IS NULL THEN 0 WHEN state = 'succeeded' THEN total ELSE floor(total * u_error)::int END,
       total,
       CASE WHEN total IS NOT NULL AND state IN ('failed', 'running')
            THEN jsonb_build_object('next_item', floor(total * u_error)::int) END,
       error, error_group,
       false,
       CASE WHEN state = 'running' OR poison THEN last_worker END,
       CASE WHEN state = 'running' THEN to_timestamp(%(end)s + 60) END,
       to_timestamp(coalesce(last_due, created)),
       CASE WHEN queue = 'gpu' THEN tenant END,
       CASE WHEN u_misc BETWEEN 0.3 AND 0.5 THEN 'request-' || i END,
       to_timestamp(created),
       to_timestamp(last_start),
       to_timestamp(CASE WHEN state IN ('succeeded', 'failed') THEN last_end
                         WHEN state = 'cancelled'
                              THEN coalesce(last_end, least(%(end)s, created + 30 + 600 * u_misc)) END),
       to_timestamp(coalesce(last_end, last_start, created)),
       CASE WHEN state = 'succeeded' THEN result_id END
FROM (
    SELECT p.*,
           CASE WHEN p.k = ANY (%(has_total)s::int[]) THEN 20 + p.i %% 180 END AS total,
           CASE p.attempts WHEN 1 THEN p.due1 WHEN 2 THEN p.due2 WHEN 3 THEN p.due3 END AS last_due,
           CASE p.attempts WHEN 1 THEN p.start1 WHEN 2 THEN p.start2 WHEN 3 THEN p.start3 END AS last_start,
           CASE WHEN p.state <> 'running'
                THEN CASE p.attempts WHEN 1 THEN p.end1 WHEN 2 THEN p.end2 WHEN 3 THEN p.end3 END END AS last_end,
           CASE p.attempts WHEN 1 THEN {WORKER.format(salt=1)} WHEN 2 THEN {WORKER.format(salt=5)}
                           WHEN 3 THEN {WORKER.format(salt=9)} END AS last_worker,
           CASE WHEN p.state = 'failed' AND p.poison
                    THEN 'lease expired ' || p.attempts || ' time(s); last on attempt ' || p.attempts || ' of '
                         || p.max_attempts || ' (worker ' || {WORKER.format(salt=9)} || ')'
                WHEN p.state = 'failed' THEN {TRACE_HEAD} || {FILLED.format(index="p.error_ix")}
                -- a job that was retried keeps the error of its last failed attempt
                WHEN p.attempts > 1 THEN {TRACE_HEAD} || {FILLED.format(index="p.retry_error_ix")}
           END AS error,
           CASE WHEN p.state = 'failed' AND p.poison THEN %(lease_expired_group)s
                WHEN p.state = 'failed' THEN (%(groups)s::text[])[p.error_ix]
                WHEN p.attempts > 1 THEN (%(groups)s::text[])[p.retry_error_ix]
           END AS error_group
    FROM synth_plan AS p
) AS j
"""

# An attempt's error: the job's final one on its last attempt, a retryable one before.
ATTEMPT_ERROR = FILLED.format(index="CASE WHEN a.attempt = p.attempts THEN p.error_ix ELSE p.retry_error_ix END")

ATTEMPTS = f"""
INSERT INTO job_attempts (job_id, claim, attempt, worker, due_at, started_at, finished_at, outcome, error)
SELECT p.id, a.attempt, a.attempt,
       CASE a.attempt WHEN 1 THEN {WORKER.format(salt=1)} WHEN 2 THEN {WORKER.format(salt=5)}
                      ELSE {WORKER.format(salt=9)} END,
       to_timestamp(a.due_at), to_timestamp(a.started_at),
       CASE WHEN a.outcome IS NOT NULL THEN to_timestamp(a.finished_at) END,
       a.outcome,
       CASE a.outcome
           WHEN 'lease_expired' THEN 'lease expired'
           WHEN 'failed' THEN {TRACE_HEAD} || {ATTEMPT_ERROR}
       END
FROM synth_plan AS p
CROSS JOIN LATERAL (VALUES
    (1, p.due1, p.start1, p.end1, p.out1),
    (2, p.due2, p.start2, p.end2, p.out2),
    (3, p.due3, p.start3, p.end3, p.out3)
) AS a(attempt, due_at, started_at, finished_at, outcome)
WHERE a.attempt <= p.attempts
"""

RESULTS = """
INSERT INTO job_results (id, job_id, body, created_at)
SELECT p.result_id, p.id,
       jsonb_build_object('output', 's3://results/' || p.tenant || '/' || p.id || '.json',
                          'tokens', (37 * (last_end - last_start))::int,
                          'score', round(mod(p.i, 1000) / 1000.0, 3)),
       to_timestamp(last_end)
FROM (SELECT p.*,
             CASE p.attempts WHEN 1 THEN p.start1 WHEN 2 THEN p.start2 ELSE p.start3 END AS last_start,
             CASE p.attempts WHEN 1 THEN p.end1 WHEN 2 THEN p.end2 ELSE p.end3 END AS last_end
      FROM synth_plan AS p
      WHERE p.state = 'succeeded') AS p
"""

# A few jobs were put back by an operator after failing, and ran again.
REPLAYS = f"""
INSERT INTO job_replays (job_id, replayed_at, replayed_by, previous_state, previous_error, previous_attempts)
SELECT p.id, to_timestamp(p.due1 - 60),
       CASE WHEN p.u_misc < 0.5 THEN 'ops@example.com' ELSE p.tenant END,
       'failed', {TRACE_HEAD} || {FILLED.format(index="p.retry_error_ix")}, p.max_attempts
FROM synth_plan AS p
WHERE p.u_replay < 0.004 AND p.state IN ('succeeded', 'failed') AND p.created < %(end)s - 86400
"""


# Jobs of the kinds with a total that record an outcome per item: one in ten of those that
# succeeded, 20 items each, about one item in 37 failed with one of three errors.
ITEM_ERRORS = [
    "ValueError: page {n} is not readable",
    "KeyError: 'title'",
    "TimeoutError: the model took more than 30 s",
]
ITEM_GROUPS = [error_group(e.replace("{n}", "7")) for e in ITEM_ERRORS]
ITEMS = """
INSERT INTO job_items (job_id, item_index, state, result, error, error_group, attempt, finished_at)
SELECT p.id, g.n,
       CASE WHEN f.failed THEN 'failed' ELSE 'ok' END,
       CASE WHEN NOT f.failed THEN jsonb_build_object('score', round(mod(p.i * 31 + g.n, 1000) / 1000.0, 3)) END,
       CASE WHEN f.failed THEN replace((%(item_errors)s::text[])[1 + mod(p.i + g.n, 3)], '{n}', g.n::text) END,
       CASE WHEN f.failed THEN (%(item_groups)s::text[])[1 + mod(p.i + g.n, 3)] END,
       p.attempts,
       to_timestamp(p.last_end - (20 - g.n) * (p.last_end - p.last_start) / 21)
FROM (SELECT p.*,
             CASE p.attempts WHEN 1 THEN p.start1 WHEN 2 THEN p.start2 ELSE p.start3 END AS last_start,
             CASE p.attempts WHEN 1 THEN p.end1 WHEN 2 THEN p.end2 ELSE p.end3 END AS last_end
      FROM synth_plan AS p
      WHERE p.state = 'succeeded' AND p.k = ANY (%(has_total)s::int[]) AND mod(p.i, 10) = 0) AS p
CROSS JOIN generate_series(0, 19) AS g(n)
CROSS JOIN LATERAL (SELECT mod(p.i * 20 + g.n, 37) = 0 AS failed) AS f
"""

HISTORY_TABLES = ("jobs", "job_attempts", "job_results", "job_replays", "job_items")

# Secondary indexes and foreign keys of the history tables, as the migrations made them.
SCHEMA_OBJECTS = """
SELECT 'index' AS what, t.relname AS table_name, c.relname AS name, pg_get_indexdef(i.indexrelid) AS definition
FROM pg_index AS i
JOIN pg_class AS c ON c.oid = i.indexrelid
JOIN pg_class AS t ON t.oid = i.indrelid
WHERE t.relnamespace = to_regnamespace(current_schema()) AND t.relname = ANY(%(tables)s)
  AND NOT EXISTS (SELECT FROM pg_constraint AS k WHERE k.conindid = i.indexrelid AND k.conrelid = i.indrelid)
UNION ALL
SELECT 'foreign key', t.relname, k.conname, pg_get_constraintdef(k.oid)
FROM pg_constraint AS k
JOIN pg_class AS t ON t.oid = k.conrelid
WHERE t.relnamespace = to_regnamespace(current_schema()) AND t.relname = ANY(%(tables)s) AND k.contype = 'f'
ORDER BY 1, 2, 3
"""


SESSION_SETTINGS = (
    # A bulk load: no need to wait for each commit's WAL flush; room to sort and hash.
    "SET synchronous_commit = off",
    "SET work_mem = '256MB'",
    "SET maintenance_work_mem = '256MB'",
)


# ANALYZE reads a sample of 300 rows per unit of the statistics target. Sampled at the
# default (30,000 rows), the CI-sized history's statistics moved from fill to fill, and so
# did a plan now and then (question 6 read job_results whole in one CI run of three); at
# 1,000 a history of up to 300,000 jobs is read whole, and its plans are the same each time.
# The benchmark's millions keep the default, as a real server's history would.
EXACT_STATISTICS_UP_TO = 300_000
EXACT_STATISTICS_TARGET = 1_000


def fill(url: str, *, jobs: int, days: float, end: datetime) -> dict[str, float]:
    """Write the history into a migrated, empty PostgreSQL database; returns seconds per stage.

    Loads the way a restore does, on two connections (one per core): the plan of
    every job's story first (an unlogged table), then jobs on one connection while
    attempts, results and replays go in on the other. Secondary indexes and foreign
    keys are dropped before and built again after (a sort each, instead of millions
    of random inserts and foreign-key probes), exactly as the migrations defined
    them, which is checked. Then VACUUM ANALYZE: the history looks like six weeks
    that autovacuum has seen (hint bits, visibility map, statistics). Last, a
    CHECKPOINT when the role may, so the load is not still being written out
    while queries are timed.
    """
    params: dict[str, Any] = {
        "jobs": jobs,
        "span": days * 86400.0,
        "end": end.timestamp(),
        "kinds": KINDS,
        "queues": QUEUES,
        "models": MODELS,
        "kind_shares": KIND_SHARES,
        "run_median": RUN_MEDIAN_SECONDS,
        "pickup_mean": PICKUP_MEAN_SECONDS,
        "failure_rate": FAILURE_RATE,
        "has_total": [i + 1 for i, flag in enumerate(HAS_TOTAL) if flag],
        "incident_kind": INCIDENT_KIND,
        "oom_error": OOM_ERROR,
        "error_count": len(ERRORS),
        "retryable_count": len(RETRYABLE_ERRORS),
        "errors": ERRORS,
        "groups": GROUPS,
        "lease_expired_group": LEASE_EXPIRED_GROUP,
        "item_errors": ITEM_ERRORS,
        "item_groups": ITEM_GROUPS,
    }
    timings: dict[str, float] = {}
    Step = tuple[str, dict[str, Any]]  # a statement and its own parameters

    def step(statement: str, **extra: Any) -> Step:
        return statement, {**params, **extra}

    with psycopg.connect(url, autocommit=True) as one, psycopg.connect(url, autocommit=True) as two:
        for conn in (one, two):
            for setting in SESSION_SETTINGS:
                conn.execute(setting)
            if jobs <= EXACT_STATISTICS_UP_TO:
                conn.execute(f"SET default_statistics_target = {EXACT_STATISTICS_TARGET}")

        def run(conn: psycopg.Connection[Any], stage: str, steps: list[Step]) -> None:
            started = time.perf_counter()
            for statement, values in steps:
                conn.execute(statement, _used(statement, values))
            timings[stage] = time.perf_counter() - started

        def both(first: tuple[str, list[Step]], second: tuple[str, list[Step]]) -> None:
            with ThreadPoolExecutor(1) as pool:
                other = pool.submit(run, two, *second)
                run(one, *first)
                other.result()

        if one.execute("SELECT count(*) FROM jobs").fetchone() != (0,):
            raise ValueError("fill() needs an empty jobs table")
        schema = one.execute(SCHEMA_OBJECTS, {"tables": list(HISTORY_TABLES)}).fetchall()
        # Names come from the catalog of the test's own database, never from input.
        indexes = {table: [step(d) for w, t, _, d in schema if w == "index" and t == table] for table in HISTORY_TABLES}
        foreign_keys = [(t, n, d) for w, t, n, d in schema if w == "foreign key"]
        drop = [step(f'DROP INDEX "{n}"') for w, _, n, _ in schema if w == "index"]
        drop += [step(f'ALTER TABLE "{t}" DROP CONSTRAINT "{n}"') for t, n, _ in foreign_keys]
        run(one, "drop indexes and foreign keys", drop)

        # Each connection plans half of the jobs (a table and a seed of its own); the view
        # reads the halves in order, so rows are written in creation order, as a queue does.
        def plan(table: str, seed: float, first: int, last: int) -> list[Step]:
            return [step(f"SELECT setseed({seed})"), step(PLAN.replace("{table}", table), first=first, last=last)]

        half = jobs // 2
        both(
            ("plan", plan("synth_plan_1", 0.42, 1, half)),
            ("plan, second half", plan("synth_plan_2", 0.43, half + 1, jobs)),
        )
        one.execute("CREATE VIEW synth_plan AS SELECT * FROM synth_plan_1 UNION ALL SELECT * FROM synth_plan_2")
        both(
            ("jobs", [step(JOBS), *indexes["jobs"]]),
            ("attempts, results, replays, items", [step(ATTEMPTS), step(RESULTS), step(REPLAYS), step(ITEMS),
                                                   *indexes["job_attempts"], *indexes["job_results"],
                                                   *indexes["job_replays"], *indexes["job_items"]]),
        )  # fmt: skip
        one.execute("DROP VIEW synth_plan")
        one.execute("DROP TABLE synth_plan_1, synth_plan_2")

        # Added NOT VALID (at once), then validated: two validations can run side by side.
        run(
            one,
            "foreign keys",
            [step(f'ALTER TABLE "{t}" ADD CONSTRAINT "{n}" {d} NOT VALID') for t, n, d in foreign_keys],
        )
        validate = {t: step(f'ALTER TABLE "{t}" VALIDATE CONSTRAINT "{n}"') for t, n, _ in foreign_keys}
        attempts_key = validate.pop("job_attempts")
        both(("validate foreign keys", [attempts_key]), ("validate the other foreign keys", list(validate.values())))
        rebuilt = one.execute(SCHEMA_OBJECTS, {"tables": list(HISTORY_TABLES)}).fetchall()
        if rebuilt != schema:
            raise AssertionError(f"the schema changed while loading: {schema} != {rebuilt}")
        both(
            ("vacuum jobs", [step("VACUUM (ANALYZE) jobs")]),
            ("vacuum the rest", [step("VACUUM (ANALYZE) job_attempts, job_results, job_replays, job_items")]),
        )
        # Write the load out now, rather than in a checkpoint while queries are being timed.
        started = time.perf_counter()
        try:
            one.execute("CHECKPOINT")
        except psycopg.errors.InsufficientPrivilege:
            pass  # only superusers and pg_checkpoint may; the timings then carry the noise
        timings["checkpoint"] = time.perf_counter() - started
    return timings


def _used(statement: str, params: dict[str, Any]) -> dict[str, Any] | None:
    used = {name: value for name, value in params.items() if f"%({name})s" in statement}
    return used or None
