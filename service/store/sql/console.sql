-- name: job_ids_in_range
-- The console's "open a job by the start of its id": the ids between a prefix's lowest
-- and highest id, through the primary key (a range read however many jobs there are).
-- Two are enough to tell "this one" from "ambiguous"; the caller asks for a few more.
SELECT id FROM jobs
WHERE id >= :low AND id <= :high
ORDER BY id
LIMIT :limit

-- name: job_replays
-- A job's replays, oldest first, through ix_job_replays_job_id: invariant 5 (a terminal
-- job changes only through replay, and the replay is recorded), shown on the job page.
SELECT replayed_at, replayed_by, previous_state, previous_error, previous_attempts
FROM job_replays
WHERE job_id = :job_id
ORDER BY id

-- name: insert_console_session
-- A login: the session id's SHA-256 (never the id), the admin token it came from, and the
-- end it cannot outlive (the caller checked the token just before; every use joins it again).
INSERT INTO console_sessions (id_hash, token_id, created_at, last_seen_at, expires_at)
VALUES (:id_hash, :token_id, {{now}}, {{now}}, {{session_end}})

-- name: console_session
-- Every console request: the session's live admin token, if the session has not ended, has
-- not been idle for :idle seconds and its token is not revoked (revoking ends its sessions at
-- once); and whether its last use is old enough (:touch_after seconds) to be written again,
-- so that most requests only read.
SELECT t.id, t.tenant, t.name, t.created_at, t.revoked_at, t.admin, t.read_only,
       CASE WHEN {{idle_since(s.last_seen_at, touch_after)}} THEN 1 ELSE 0 END AS touch
FROM console_sessions AS s
JOIN api_tokens AS t ON t.id = s.token_id
WHERE s.id_hash = :id_hash AND {{live_admin_token(t)}}
  AND s.expires_at > {{now}} AND NOT {{idle_since(s.last_seen_at, idle)}}

-- name: touch_console_session
-- A session in use: its idle timeout starts again.
UPDATE console_sessions SET last_seen_at = {{now}} WHERE id_hash = :id_hash

-- name: end_console_session
-- Logout: the row goes, and with it every copy of the cookie.
DELETE FROM console_sessions WHERE id_hash = :id_hash

-- name: prune_console_sessions
-- At each login, the sessions that ended (expired, or idle for :idle seconds) go: the table
-- holds the live sessions and a few more, through ix_console_sessions_expires_at.
DELETE FROM console_sessions
WHERE expires_at <= {{now}} OR {{idle_since(last_seen_at, idle)}}

-- name: record_action
-- A change made from the console, after it was made: who, when (the database clock), what, on
-- what, how many jobs it touched (the audit trail of /ui/audit and of a job's page).
INSERT INTO console_audit (at, actor, action, target, detail, jobs)
VALUES ({{now}}, :actor, :action, :target, :detail, :jobs)

-- name: list_actions
-- The audit trail newest first, a page at a time (keyset on the primary key), all of it or
-- one target's (through ix_console_audit_target).
SELECT id, at, actor, action, target, detail, jobs
FROM console_audit
WHERE (CAST(:target AS text) IS NULL OR target = :target)
  AND (CAST(:before_id AS bigint) IS NULL OR id < :before_id)
ORDER BY id DESC
LIMIT :limit
