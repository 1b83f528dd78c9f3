-- name: acquire_leadership
-- One holder at a time. The row is taken only when its lease ended (expired or resigned),
-- and then with term + 1: the fencing number every leader write is checked against. It is
-- renewed (term kept) only by its owner while its lease lasts; an owner whose own lease
-- ran out takes it again like anyone, with a new term, since its old term's writes were
-- already refused. One statement. The UPDATE locks the row only when it will take or renew
-- it (a candidate that finds the lease held reads it and locks nothing, so a fleet of
-- candidates never queues on the row or waits on a leader's fence); racing takers queue on
-- the row and each re-reads it before deciding, so one takes a free lease. The first
-- insert races on the key (DO NOTHING: the loser reads nothing and tries again).
-- Answered with the row and, when another holds it, free_in: seconds until its lease ends,
-- so a candidate comes back then instead of polling. Database clock only.
WITH n AS (
    SELECT {{now}} AS ts
),
{{lead}}
SELECT * FROM lead

-- name: resign_leadership
-- A graceful shutdown ends its own term's lease now (the same token as the fence), so a
-- successor takes over at once instead of after the lease. The row and its term stay:
-- terms only grow, so an old token can never match again.
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
-- The fence of a leader's write, first in the write's transaction: the token must still hold
-- an unexpired lease, and FOR SHARE keeps it so until the transaction ends (a takeover's
-- upsert waits for the lock, then finds its term already over). No row: LeadershipLost.
SELECT term
FROM leaders
WHERE name = :leader_name AND owner = :leader_owner AND term = :leader_term AND expires_at > {{now}}
FOR SHARE

-- fragment: lead
-- The leadership's CTEs, after n (the clock): taken (renewed by its owner, or taken with
-- term + 1 once its lease ended), founded (the first insert), mine (either), and lead, the
-- answer: the row with mine = true when the caller holds it now, else the holder's row with
-- free_in, the seconds until its lease ends. acquire_leadership and check_in (workers.sql)
-- both take the leadership with it, so the two cannot differ.
taken AS (
    UPDATE leaders AS l
    SET owner = :owner,
        term = CASE WHEN l.expires_at > n.ts THEN l.term ELSE l.term + 1 END,
        acquired_at = CASE WHEN l.expires_at > n.ts THEN l.acquired_at ELSE n.ts END,
        renewed_at = n.ts,
        expires_at = n.ts + make_interval(secs => :lease_seconds)
    FROM n
    WHERE l.name = :name AND (l.expires_at <= n.ts OR l.owner = :owner)
    RETURNING l.name, l.owner, l.term, l.acquired_at, l.expires_at
),
founded AS (
    INSERT INTO leaders (name, owner, term, acquired_at, renewed_at, expires_at)
    SELECT :name, :owner, 1, n.ts, n.ts, n.ts + make_interval(secs => :lease_seconds)
    FROM n
    WHERE NOT EXISTS (SELECT FROM leaders WHERE name = :name)
    ON CONFLICT (name) DO NOTHING
    RETURNING name, owner, term, acquired_at, expires_at
),
mine AS (
    SELECT * FROM taken UNION ALL SELECT * FROM founded
),
lead AS (
    SELECT name, owner, term, acquired_at, expires_at, true AS mine, 0.0::float8 AS free_in
    FROM mine
    UNION ALL
    SELECT l.name, l.owner, l.term, l.acquired_at, l.expires_at, false,
           date_part('epoch', l.expires_at - n.ts)::float8
    FROM leaders AS l, n
    WHERE l.name = :name AND NOT EXISTS (SELECT FROM mine)
)
