-- name: acquire_leadership
-- One holder at a time: taken only when its lease ended (expired or resigned), with term + 1;
-- renewed, term kept, only by its owner while its lease lasts. One statement under the write
-- lock; a candidate that finds the lease held gets no row back and reads the holder's
-- (HELD_LEADERSHIP) in the same transaction. The store's clock only.
INSERT INTO leaders AS l (name, owner, term, acquired_at, renewed_at, expires_at)
VALUES (:name, :owner, 1, {{now}}, {{now}}, strftime('%Y-%m-%d %H:%M:%f', {{now}}, :lease_seconds || ' seconds'))
ON CONFLICT (name) DO UPDATE SET
    owner = excluded.owner,
    term = CASE WHEN l.expires_at > excluded.renewed_at THEN l.term ELSE l.term + 1 END,
    acquired_at = CASE WHEN l.expires_at > excluded.renewed_at THEN l.acquired_at ELSE excluded.acquired_at END,
    renewed_at = excluded.renewed_at,
    expires_at = excluded.expires_at
WHERE l.expires_at <= excluded.renewed_at OR l.owner = excluded.owner
RETURNING name, owner, term, acquired_at, expires_at, 1 AS mine, 0.0 AS free_in

-- name: held_leadership
-- The lease another holds, and free_in: seconds until it ends, so a candidate comes back then.
SELECT name, owner, term, acquired_at, expires_at, 0 AS mine,
       (julianday(expires_at) - julianday({{now}})) * 86400.0 AS free_in
FROM leaders
WHERE name = :name

-- name: resign_leadership
-- A graceful shutdown ends its own term's lease now; the row and its term stay (terms only grow).
UPDATE leaders
SET expires_at = {{now}}, renewed_at = {{now}}
WHERE name = :leader_name AND owner = :leader_owner AND term = :leader_term AND expires_at > {{now}}
RETURNING name

-- name: current_leader
-- Who leads now, for the console, stats and /metrics: an unexpired lease only.
SELECT name, owner, term, acquired_at, expires_at
FROM leaders
WHERE name = :name AND expires_at > {{now}}

-- name: check_leader
-- The fence of a leader's write, in the write's transaction: the token must still hold an
-- unexpired lease. No row: LeadershipLost, and the write's transaction rolls back.
SELECT term
FROM leaders
WHERE name = :leader_name AND owner = :leader_owner AND term = :leader_term AND expires_at > {{now}}
