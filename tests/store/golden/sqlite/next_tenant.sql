
SELECT tenant FROM jobs INDEXED BY ix_jobs_claimable
WHERE state = 'queued' AND parents_pending = 0 AND queue = :queue AND tenant > :after AND run_after <= :now
  AND (:kinds IS NULL OR kind IN (SELECT value FROM json_each(:kinds)))
ORDER BY tenant
LIMIT 1
