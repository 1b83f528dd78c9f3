"""The schema, as SQLAlchemy MetaData: Alembic's source of truth.

The same tables serve PostgreSQL (JSONB, TIMESTAMPTZ, UUID) and SQLite (JSON as
TEXT — declared TEXT, so SQLite's numeric affinity never turns the JSON text ``0`` into 0 —, timestamps as UTC text ``YYYY-MM-DD HH:MM:SS.SSS`` that sort as they
compare, UUIDs as 36-character text).

Invariants the database itself enforces (CHECK constraints):
- a job's state is one of the five;
- ``failed`` has a non-empty error (invariant 3 of the design);
- ``running`` has a lease owner and a lease expiry (invariant 2);
- progress ``done`` never passes ``total`` when a total is known.

Why heartbeats are HOT updates on PostgreSQL: a heartbeat writes only
``lease_expires_at``, ``done``, ``total``, ``checkpoint`` and ``updated_at``, and
no index covers any of them, not even in a partial-index predicate. Reaping
finds expired leases through ``ix_jobs_running``, a partial index on running
jobs keyed by ``concurrency_key``; the expiry is filtered in the heap. That scan
is bounded by the number of running jobs (the fleet's slots), not by history.
With ``fillfactor = 80`` (set in the migration) the new row version fits on the
same page, so a heartbeat touches no index at all.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

Id = sa.Uuid(as_uuid=True).with_variant(sa.String(36), "sqlite")
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql").with_variant(sa.Text(), "sqlite")
Timestamp = sa.DateTime(timezone=True).with_variant(sa.String(23), "sqlite")

HELD_UNTIL_PG = "'9999-12-31 00:00:00+00'::timestamptz"
"""service.workflows.HELD_UNTIL as PostgreSQL's literal: the run_after of a job waiting for
parents, in two index predicates (the store's SQL writes the same literal: ``held_until``)."""

jobs = sa.Table(
    "jobs",
    metadata,
    sa.Column("id", Id, primary_key=True),
    sa.Column("tenant", sa.Text, nullable=False, server_default="default"),
    sa.Column("queue", sa.Text, nullable=False, server_default="default"),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("payload", Json, nullable=False),
    sa.Column("state", sa.Text, nullable=False, server_default="queued"),
    sa.Column("priority", sa.Integer, nullable=False, server_default="0"),
    # attempts: the retry budget used so far (a replay resets it, a release gives one back).
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("max_attempts", sa.Integer, nullable=False, server_default="3"),
    # True: the enqueue named no max_attempts, so the claim writes the kind's (its handler's) into max_attempts.
    sa.Column("max_attempts_default", sa.Boolean, nullable=False, server_default=sa.false()),
    # claims counts every claim ever (never reset, never given back): the fencing token's number.
    sa.Column("claims", sa.Integer, nullable=False, server_default="0"),
    sa.Column("done", sa.Integer, nullable=False, server_default="0"),
    sa.Column("total", sa.Integer, nullable=True),
    sa.Column("checkpoint", Json, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    # The error's first 80 characters with ids, numbers and addresses masked
    # (service.jobs.error_group): failures group by it, so one bug is one group.
    sa.Column("error_group", sa.Text, nullable=True),
    sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("lease_owner", sa.Text, nullable=True),
    sa.Column("lease_expires_at", Timestamp, nullable=True),
    sa.Column("run_after", Timestamp, nullable=False),
    sa.Column("concurrency_key", sa.Text, nullable=True),
    sa.Column("idempotency_key", sa.Text, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("started_at", Timestamp, nullable=True),
    sa.Column("finished_at", Timestamp, nullable=True),
    sa.Column("updated_at", Timestamp, nullable=False),
    # No foreign key: job_results already points back at jobs, and a cycle would make pruning order-dependent.
    sa.Column("result_id", Id, nullable=True),
    # Item outcomes so far (job_items), counted here so a status poll stays one read of this row.
    # Written by heartbeats, so never indexed: the heartbeat stays a HOT update.
    sa.Column("items_ok", sa.Integer, nullable=False, server_default="0"),
    sa.Column("items_failed", sa.Integer, nullable=False, server_default="0"),
    # Workflows (migration 0011, service.workflows). The parents not yet settled: while above 0
    # the job is queued but held (run_after = HELD_UNTIL, its own due time in due_after_parents),
    # and the statement that settles its last parent puts the due time back.
    sa.Column("parents_pending", sa.Integer, nullable=False, server_default="0"),
    sa.Column("parents_total", sa.Integer, nullable=False, server_default="0"),
    sa.Column("on_parent_failure", sa.Text, nullable=False, server_default="cancel"),
    sa.Column("due_after_parents", Timestamp, nullable=True),
    # Grows when a transaction adds or re-arms dependents of this job: a completion that waited
    # for the row compares it with its snapshot's, so no edge committed meanwhile is missed.
    sa.Column("dependents_version", sa.Integer, nullable=False, server_default="0"),
    # The job whose failure or cancellation cancelled this one; replaying it re-arms this one.
    sa.Column("cancelled_by", Id, nullable=True),
    # The workflow the job belongs to (migration 0016, service.workflows.workflow_ids): the id of
    # its root, set at enqueue on every job with parents or dependents (and on a job that
    # becomes a parent, at its children's enqueue); NULL on an independent job.
    sa.Column("workflow_id", Id, nullable=True),
    sa.CheckConstraint("state IN ('queued','running','succeeded','failed','cancelled')", name="state"),
    sa.CheckConstraint("state <> 'failed' OR (error IS NOT NULL AND error <> '')", name="failed_has_error"),
    sa.CheckConstraint(
        "state <> 'running' OR (lease_owner IS NOT NULL AND lease_expires_at IS NOT NULL)",
        name="running_has_lease",
    ),
    sa.CheckConstraint("total IS NULL OR total <= 0 OR done <= total", name="done_within_total"),
    sa.CheckConstraint("done >= 0 AND (total IS NULL OR total >= 0)", name="progress_non_negative"),
    sa.CheckConstraint("priority >= 0", name="priority_non_negative"),
    sa.CheckConstraint("on_parent_failure IN ('cancel','run')", name="on_parent_failure"),
    sa.CheckConstraint("parents_pending >= 0 AND parents_pending <= parents_total", name="parents_pending"),
    sa.CheckConstraint("attempts >= 0 AND max_attempts >= 1 AND attempts <= max_attempts", name="attempts"),
    # The claim reads only this index: queued rows, per queue and tenant in claim order
    # (the fair claim walks it tenant by tenant, a loose index scan). History never enters it,
    # nor jobs waiting for parents (migration 0011 says what they cost a claim inside it).
    # On PostgreSQL a job waiting for parents is marked by its run_after (HELD_UNTIL), not
    # by parents_pending, so a parent's completion that leaves its child waiting is a HOT
    # update of the child (migration 0015). The autoscaler's count (jobq_slots_needed) reads it
    # too: no other index of queued rows is left for a claim to be planned on (migration 0017).
    sa.Index(
        "ix_jobs_claimable",
        "queue",
        "tenant",
        sa.text("priority DESC"),
        "run_after",
        "id",
        postgresql_where=sa.text(f"state = 'queued' AND run_after < {HELD_UNTIL_PG}"),
        sqlite_where=sa.text("state = 'queued' AND parents_pending = 0"),
    ),
    # Queued jobs waiting for parents, for the queue statistics' counts (never the claim).
    sa.Index(
        "ix_jobs_held",
        "queue",
        "kind",
        postgresql_where=sa.text(f"state = 'queued' AND run_after >= {HELD_UNTIL_PG}"),
        sqlite_where=sa.text("state = 'queued' AND parents_pending > 0"),
    ),
    # Running jobs only: the reaper's scan and the fair claim's running jobs per tenant.
    # Bounded by fleet size.
    sa.Index(
        "ix_jobs_running",
        "tenant",
        "concurrency_key",
        postgresql_where=sa.text("state = 'running'"),
        sqlite_where=sa.text("state = 'running'"),
    ),
    # A tenant's jobs newest first (ids are time-ordered UUIDv7).
    sa.Index("ix_jobs_tenant_id", "tenant", sa.text("id DESC")),
    # The same idempotency key names the same job, per tenant.
    sa.Index(
        "uq_jobs_tenant_idempotency_key",
        "tenant",
        "idempotency_key",
        unique=True,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
        sqlite_where=sa.text("idempotency_key IS NOT NULL"),
    ),
    # The jobs a failure cancelled, by the job that failed: what its replay re-arms.
    sa.Index(
        "ix_jobs_cancelled_by",
        "cancelled_by",
        postgresql_where=sa.text("cancelled_by IS NOT NULL"),
        sqlite_where=sa.text("cancelled_by IS NOT NULL"),
    ),
    # One workflow's jobs (migration 0016): its progress counted, and its jobs newest first (the
    # console's search). Only jobs of a workflow enter it: an independent job costs nothing.
    sa.Index(
        "ix_jobs_workflow_id_id",
        "workflow_id",
        "id",
        postgresql_where=sa.text("workflow_id IS NOT NULL"),
        sqlite_where=sa.text("workflow_id IS NOT NULL"),
    ),
    # The console's search (migration 0014): the jobs that show an error, newest first (an error
    # text is matched on these only), and one idempotency or concurrency key's jobs, any tenant.
    sa.Index(
        "ix_jobs_errored_id",
        "id",
        postgresql_where=sa.text("error IS NOT NULL AND state <> 'succeeded'"),
        sqlite_where=sa.text("error IS NOT NULL AND state <> 'succeeded'"),
    ),
    sa.Index(
        "ix_jobs_idempotency_key_id",
        "idempotency_key",
        "id",
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
        sqlite_where=sa.text("idempotency_key IS NOT NULL"),
    ),
    sa.Index(
        "ix_jobs_concurrency_key_id",
        "concurrency_key",
        "id",
        postgresql_where=sa.text("concurrency_key IS NOT NULL"),
        sqlite_where=sa.text("concurrency_key IS NOT NULL"),
    ),
    # Finished jobs by time: failures and rates over a window, pruning and analysts'
    # date ranges read a slice of this, never the whole history. Written once, at finish.
    sa.Index("ix_jobs_finished_at", "finished_at"),
    # Failed jobs by time, and by tenant and time: the analysts' "top errors this week" and
    # "one tenant's failures" read a few percent of a window instead of every job in it.
    # Only failed rows enter them, written once when a job fails.
    sa.Index(
        "ix_jobs_failed_finished_at",
        "finished_at",
        postgresql_where=sa.text("state = 'failed'"),
        sqlite_where=sa.text("state = 'failed'"),
    ),
    sa.Index(
        "ix_jobs_failed_tenant_finished_at",
        "tenant",
        "finished_at",
        postgresql_where=sa.text("state = 'failed'"),
        sqlite_where=sa.text("state = 'failed'"),
    ),
)

job_results = sa.Table(
    "job_results",
    metadata,
    sa.Column("id", Id, primary_key=True),
    sa.Column("job_id", Id, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("body", Json, nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Index("ix_job_results_job_id", "job_id"),
)

# Workflows: one row per dependency (the child waits for the parent). The primary key is "the
# children of a parent", what a parent's completion releases; the other index "the parents of a
# child", what explain and ctx.parent_results() read.
job_edges = sa.Table(
    "job_edges",
    metadata,
    sa.Column("parent", Id, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("child", Id, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    sa.PrimaryKeyConstraint("parent", "child"),
    sa.CheckConstraint("parent <> child", name="not_self"),
    sa.Index("ix_job_edges_child_parent", "child", "parent"),
)

job_attempts = sa.Table(
    "job_attempts",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", Id, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("claim", sa.Integer, nullable=False),  # the job's claims at this claim: the row's key
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("worker", sa.Text, nullable=False),
    # When the job was due (its run_after at claim): started_at - due_at is the pickup latency.
    sa.Column("due_at", Timestamp, nullable=False),
    sa.Column("started_at", Timestamp, nullable=False),
    sa.Column("finished_at", Timestamp, nullable=True),
    sa.Column("outcome", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    sa.CheckConstraint(
        "outcome IS NULL OR outcome IN ('succeeded','failed','lease_expired','released','cancelled')",
        name="outcome",
    ),
    sa.Index("uq_job_attempts_job_id_claim", "job_id", "claim", unique=True),
    sa.Index("ix_job_attempts_finished_at", "finished_at"),
    # Reclaimed attempts by time, with what the analysts' questions about them read (an
    # index-only scan on PostgreSQL). Only lease_expired attempts enter it: the reaper's.
    sa.Index(
        "ix_job_attempts_lease_expired_finished_at",
        "finished_at",
        postgresql_include=["job_id", "worker"],
        postgresql_where=sa.text("outcome = 'lease_expired'"),
        sqlite_where=sa.text("outcome = 'lease_expired'"),
    ),
)

job_items = sa.Table(
    "job_items",
    metadata,
    sa.Column("job_id", Id, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("item_index", sa.Integer, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
    sa.Column("result", Json, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
    # The error masked as service.jobs.error_group masks a job's: failed items group by it.
    sa.Column("error_group", sa.Text, nullable=True),
    sa.Column("attempt", sa.Integer, nullable=False),  # the attempt that recorded this outcome
    sa.Column("finished_at", Timestamp, nullable=False),
    # The primary key is "the items of a job in order": /items pages and a resumed attempt read it.
    sa.PrimaryKeyConstraint("job_id", "item_index"),
    sa.CheckConstraint("state IN ('ok','failed')", name="state"),
    sa.CheckConstraint("state <> 'failed' OR (error IS NOT NULL AND error <> '')", name="failed_has_error"),
    sa.CheckConstraint("item_index >= 0", name="index_non_negative"),
    # "The failed items of a job": /items?state=failed and a replay of failed items read only these.
    sa.Index(
        "ix_job_items_failed",
        "job_id",
        "item_index",
        postgresql_where=sa.text("state = 'failed'"),
        sqlite_where=sa.text("state = 'failed'"),
    ),
    # Failed items by time, for the analysts' "which items failed this week": a window of
    # failures, never every item ever. Only failed rows enter it, so ok items cost it nothing.
    sa.Index(
        "ix_job_items_failed_finished_at",
        "finished_at",
        postgresql_where=sa.text("state = 'failed'"),
        sqlite_where=sa.text("state = 'failed'"),
    ),
)

job_replays = sa.Table(
    "job_replays",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", Id, sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    sa.Column("replayed_at", Timestamp, nullable=False),
    sa.Column("replayed_by", sa.Text, nullable=False),
    sa.Column("previous_state", sa.Text, nullable=False),
    sa.Column("previous_error", sa.Text, nullable=True),
    sa.Column("previous_attempts", sa.Integer, nullable=False),
    sa.Index("ix_job_replays_job_id", "job_id"),
)

workers = sa.Table(
    "workers",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("host", sa.Text, nullable=False),
    sa.Column("pid", sa.Integer, nullable=False),
    sa.Column("queues", Json, nullable=False),
    sa.Column("kinds", Json, nullable=False),
    sa.Column("concurrency", sa.Integer, nullable=False),
    sa.Column("started_at", Timestamp, nullable=False),
    sa.Column("last_seen_at", Timestamp, nullable=False),
    sa.Index("ix_workers_last_seen_at", "last_seen_at"),
)

api_tokens = sa.Table(
    "api_tokens",
    metadata,
    sa.Column("id", Id, primary_key=True),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("name", sa.Text, nullable=True),
    # SHA-256 of the token; the token itself is shown once and never stored.
    sa.Column("token_hash", sa.Text, nullable=False, unique=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("revoked_at", Timestamp, nullable=True),
    # An operator's token (the console): it names no tenant and /v1 refuses it.
    sa.Column("admin", sa.Boolean, nullable=False, server_default=sa.false()),
    # An operator's token that may look at the console and change nothing (migration 0012).
    sa.Column("read_only", sa.Boolean, nullable=False, server_default=sa.false()),
)

# The console's sessions (service.console.session): the SHA-256 of a random session id, the
# admin token it came from (revoked: the session ends), last use (the idle timeout), its end.
console_sessions = sa.Table(
    "console_sessions",
    metadata,
    sa.Column("id_hash", sa.Text, primary_key=True),
    sa.Column("token_id", Id, sa.ForeignKey("api_tokens.id", ondelete="CASCADE"), nullable=False),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("last_seen_at", Timestamp, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
    sa.Index("ix_console_sessions_token_id", "token_id"),
    sa.Index("ix_console_sessions_expires_at", "expires_at"),
)

# Every change made from the console: who, when, what, on what, how many jobs (/ui/audit).
console_audit = sa.Table(
    "console_audit",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("at", Timestamp, nullable=False),
    sa.Column("actor", sa.Text, nullable=False),
    sa.Column("action", sa.Text, nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("detail", sa.Text, nullable=False),
    sa.Column("jobs", sa.Integer, nullable=False),
    sa.Index("ix_console_audit_target", "target", "id"),
)

# Fleet-wide limits (service.limits): what operators set, one row per scope.
limits = sa.Table(
    "limits",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("concurrency", sa.Integer, nullable=True),
    sa.Column("rate", sa.Integer, nullable=True),
    sa.Column("per_seconds", sa.Float, nullable=True),
    sa.Column("weight", sa.Float, nullable=True),  # NULL: not set here (a tenant inherits tenant:*, else 1)
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.CheckConstraint("concurrency IS NULL OR concurrency >= 0", name="concurrency"),
    sa.CheckConstraint(
        "(rate IS NULL) = (per_seconds IS NULL) AND (rate IS NULL OR (rate >= 1 AND per_seconds > 0))", name="rate"
    ),
    sa.CheckConstraint("weight IS NULL OR weight > 0", name="weight"),
)

# The live state of each limited scope: a tenant:* limit gives every tenant a row of its own.
# ``running`` is exact (claims add, every statement that ends a run subtracts, in that same
# statement); the claim locks the rows of the scopes it takes from (service/store/postgres/
# statements.py, CLAIM_JOBS, says why that is safe). The limit is copied here from ``limits``
# (the tenant's own, else tenant:*), so the claim reads one row per scope. A rate limit
# counts starts per window of ``per_seconds`` aligned to the epoch: ``window_starts`` since
# ``window_start``.
scope_counters = sa.Table(
    "scope_counters",
    metadata,
    sa.Column("scope", sa.Text, primary_key=True),
    sa.Column("running", sa.Integer, nullable=False, server_default="0"),
    sa.Column("concurrency", sa.Integer, nullable=True),
    sa.Column("rate", sa.Integer, nullable=True),
    sa.Column("per_seconds", sa.Float, nullable=True),
    sa.Column("window_start", Timestamp, nullable=True),
    sa.Column("window_starts", sa.Integer, nullable=False, server_default="0"),
    # A slot given back twice would show here at once, not as a limit that lets one too many run.
    sa.CheckConstraint("running >= 0", name="running_non_negative"),
)

# Periodic jobs (service.schedules): one row per schedule. Every worker reads the due ones
# (ix_schedules_due) and fires each with a compare-and-set on next_run_at; the tick is the
# job's idempotency key, so one job per tick whatever the number of workers.
schedules = sa.Table(
    "schedules",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("cron", sa.Text, nullable=False),
    sa.Column("timezone", sa.Text, nullable=False, server_default="UTC"),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("payload", Json, nullable=False),
    sa.Column("queue", sa.Text, nullable=False, server_default="default"),
    sa.Column("tenant", sa.Text, nullable=False, server_default="default"),
    sa.Column("catch_up", sa.Text, nullable=False, server_default="one"),
    sa.Column("source", sa.Text, nullable=False, server_default="cli"),
    sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
    sa.Column("next_run_at", Timestamp, nullable=False),
    sa.Column("last_run_at", Timestamp, nullable=True),
    sa.Column("last_job_id", Id, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    sa.CheckConstraint("catch_up IN ('one','skip')", name="catch_up"),
    sa.CheckConstraint("source IN ('code','cli')", name="source"),
    # The schedulers' one read: the due schedules, paused ones never in it.
    sa.Index(
        "ix_schedules_due",
        "next_run_at",
        postgresql_where=sa.text("NOT paused"),
        sqlite_where=sa.text("NOT paused"),
    ),
)

# -- the daily rollup (service.maintenance.rollup folds finished jobs into it) -----------------
# The analysts' day-level views read these instead of weeks of job rows. Keyed by the UTC day
# a job finished first, so a range of days reads a slice of the primary key.
Day = sa.Date().with_variant(sa.String(10), "sqlite")

job_daily_rollup = sa.Table(
    "job_daily_rollup",
    metadata,
    sa.Column("day", Day, nullable=False),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("queue", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("succeeded", sa.Integer, nullable=False),
    sa.Column("failed", sa.Integer, nullable=False),
    sa.Column("cancelled", sa.Integer, nullable=False),
    sa.Column("retried", sa.Integer, nullable=False),  # succeeded or failed after more than one attempt
    sa.Column("retried_twice", sa.Integer, nullable=False),  # ... after three or more
    sa.Column("attempts", sa.Integer, nullable=False),  # of the succeeded and failed jobs, all told
    sa.Column("run_seconds", sa.Float, nullable=False),  # the last attempts' runs, succeeded and failed
    sa.PrimaryKeyConstraint("day", "tenant", "queue", "kind"),
)

# One row per bucket that holds jobs: ``measure`` 'run' (the run of a succeeded job: its last
# attempt's) or 'wait' (the first attempt's pickup). ``seconds`` is the bucket's middle.
job_daily_histogram = sa.Table(
    "job_daily_histogram",
    metadata,
    sa.Column("day", Day, nullable=False),
    sa.Column("measure", sa.Text, nullable=False),
    sa.Column("tenant", sa.Text, nullable=False),
    sa.Column("queue", sa.Text, nullable=False),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("bucket", sa.Integer, nullable=False),
    sa.Column("seconds", sa.Float, nullable=False),
    sa.Column("jobs", sa.Integer, nullable=False),
    sa.PrimaryKeyConstraint("day", "measure", "tenant", "queue", "kind", "bucket"),
    sa.CheckConstraint("measure IN ('run','wait')", name="measure"),
)

# How far the rollup has folded: the last job folded, in (finished_at, id) order. One row.
rollup_watermark = sa.Table(
    "rollup_watermark",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("finished_at", Timestamp, nullable=True),
    sa.Column("job_id", Id, nullable=True),
)

# The leadership leases (service.maintenance.leadership): one row per leadership, held by one
# worker until ``expires_at``. ``term`` grows by one at each takeover and is the fencing number
# every leader's write is checked against; a resignation ends the lease (expires_at = now) and
# keeps the row, so a term is never reused.
leaders = sa.Table(
    "leaders",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("owner", sa.Text, nullable=False),
    sa.Column("term", sa.BigInteger, nullable=False),
    sa.Column("acquired_at", Timestamp, nullable=False),  # when this term began
    sa.Column("renewed_at", Timestamp, nullable=False),
    sa.Column("expires_at", Timestamp, nullable=False),
    sa.CheckConstraint("term >= 1", name="term_positive"),
)

# The releases this schema serves, by their newest revision (migration 0011): written after every
# migration from the ``compatible_with_previous`` markers of the revisions (service.store.migrate),
# read by a release that finds the schema ahead of it, to tell a safe rollback from an unsafe one.
schema_compatibility = sa.Table(
    "schema_compatibility",
    metadata,
    sa.Column("revision", sa.Text, primary_key=True),
)
