
UPDATE scope_counters SET running = running - 1
WHERE scope IN (SELECT 'tenant:' || tenant FROM jobs WHERE id = :job_id
                UNION ALL SELECT 'kind:' || kind FROM jobs WHERE id = :job_id
                UNION ALL SELECT 'queue:' || queue FROM jobs WHERE id = :job_id
                UNION ALL SELECT 'key:' || concurrency_key FROM jobs WHERE id = :job_id)
