
SELECT id, tenant, kind, queue, concurrency_key, priority, run_after FROM jobs INDEXED BY ix_jobs_claimable
WHERE state = 'queued' AND parents_pending = 0 AND queue = :queue AND tenant = :tenant AND run_after <= :now
  AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
  AND NOT EXISTS (SELECT 1 FROM scope_counters AS s
                  WHERE s.scope IN ('kind:' || jobs.kind, 'queue:' || jobs.queue, 'key:' || jobs.concurrency_key)
                    AND s.concurrency IS NOT NULL AND s.running >= s.concurrency)
ORDER BY priority DESC, run_after, id
LIMIT :limit
