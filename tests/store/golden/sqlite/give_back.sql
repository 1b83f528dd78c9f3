
UPDATE scope_counters SET running = running - 1
WHERE EXISTS (SELECT 1 FROM jobs AS j WHERE j.id = :job_id AND scope_counters.scope IN ('tenant:' || j.tenant, 'kind:' || j.kind, 'queue:' || j.queue, 'key:' || j.concurrency_key))
