
UPDATE scope_counters
SET running = running + :jobs,
    window_start = CASE WHEN rate IS NULL THEN window_start ELSE :window END,
    window_starts = CASE WHEN rate IS NULL THEN window_starts
                         WHEN window_start = :window THEN window_starts + :jobs ELSE :jobs END
WHERE scope = :scope
