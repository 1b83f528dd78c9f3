-- fragment: session_end
-- When a console session ends whatever happens: :lifetime seconds after the login.
strftime('%Y-%m-%d %H:%M:%f', :now, '+' || :lifetime || ' seconds')

-- fragment: idle_since(column, seconds)
-- The instant in column is more than :seconds seconds before now.
{column} < strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :{seconds} || ' seconds')

-- name: recent_outcomes
-- The console's charts over a short window (1 h, 24 h): jobs that succeeded or failed per
-- queue or kind (:by) and time bucket, with their run (the last attempt's, as the rollup
-- counts it) and their first attempt's queue wait. Reads the window of ix_jobs_finished_at:
-- its cost follows the jobs finished in it, never the history; the wait is a scalar subquery,
-- one probe of uq_job_attempts_job_id_claim per job. A job that ended exactly "now" goes in
-- the last bucket.
SELECT name, bucket,
       count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE state = 'failed') AS failed,
       coalesce(sum(run), 0.0) AS run_seconds, count(run) AS runs,
       coalesce(sum(wait), 0.0) AS wait_seconds, count(wait) AS waits
FROM (
    SELECT CASE WHEN :by = 'kind' THEN j.kind ELSE j.queue END AS name,
           min(:buckets - 1, CAST(((julianday(j.finished_at) - julianday(:now)) * 86400.0 + :window)
                                  / :bucket_seconds AS INTEGER)) AS bucket,
           j.state,
           (julianday(j.finished_at) - julianday(j.started_at)) * 86400.0 AS run,
           (SELECT (julianday(a.started_at) - julianday(a.due_at)) * 86400.0
            FROM job_attempts AS a WHERE a.job_id = j.id AND a.claim = 1) AS wait
    FROM jobs AS j
    WHERE j.finished_at >= strftime('%Y-%m-%d %H:%M:%f', :now, '-' || :window || ' seconds')
      AND j.state IN ('succeeded', 'failed')
) AS finished
GROUP BY name, bucket
ORDER BY name, bucket

-- name: daily_outcomes
-- The console's charts over days (7 d): the daily rollup (job_daily_rollup, and the wait
-- histogram's buckets for the queue wait), a slice of each primary key from :first_day on;
-- no job row is read. Bucket n is :first_day + n days.
SELECT name, CAST(julianday(day) - julianday(:first_day) AS INTEGER) AS bucket,
       sum(succeeded) AS succeeded, sum(failed) AS failed,
       sum(run_seconds) AS run_seconds, sum(runs) AS runs,
       sum(wait_seconds) AS wait_seconds, sum(waits) AS waits
FROM (
    SELECT CASE WHEN :by = 'kind' THEN kind ELSE queue END AS name, day, succeeded, failed,
           run_seconds, succeeded + failed AS runs, 0.0 AS wait_seconds, 0 AS waits
    FROM job_daily_rollup
    WHERE day >= :first_day
    UNION ALL
    SELECT CASE WHEN :by = 'kind' THEN kind ELSE queue END, day, 0, 0, 0.0, 0, seconds * jobs, jobs
    FROM job_daily_histogram
    WHERE day >= :first_day AND measure = 'wait'
) AS d
GROUP BY name, day
ORDER BY name, day
