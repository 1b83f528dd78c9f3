-- fragment: job_scopes(x)
-- The one SQL home of the scopes a job row (alias x) counts in, as a list of values:
-- its tenant, kind, queue and, when it has one, its concurrency key ('key:' || NULL is
-- NULL, which no scope equals). tenant:* is never a scope of its own: it gives each
-- tenant a tenant:NAME counter. service.limits.job_scopes is the same rule in Python.
'tenant:' || {x}.tenant, {{scopes_below_tenant(x)}}

-- fragment: scopes_below_tenant(x)
-- A job's scopes other than its tenant's: the claim checks a tenant's room once per
-- tenant, and these once per job.
'kind:' || {x}.kind, 'queue:' || {x}.queue, 'key:' || {x}.concurrency_key

-- fragment: every_tenant_limited
-- Whether a tenant:* limit counts anything: then every tenant has a counter of its own
-- (made with its first queued job), and a tenant without one gets no room.
EXISTS (SELECT 1 FROM limits AS d WHERE d.scope = 'tenant:*' AND (d.concurrency IS NOT NULL OR d.rate IS NOT NULL))
