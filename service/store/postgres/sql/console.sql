-- fragment: session_end
-- When a console session ends whatever happens: :lifetime seconds after the login.
{{now}} + make_interval(secs => :lifetime::float8)

-- fragment: idle_since(column, seconds)
-- The instant in column is more than :seconds seconds before now.
{column} < {{now}} - make_interval(secs => :{seconds}::float8)

-- name: recent_outcomes
-- The console's charts over a short window (1 h, 24 h): jobs that succeeded or failed per
-- queue or kind (:by) and time bucket, with their run (the last attempt's, as the rollup
-- counts it) and their first attempt's queue wait. Reads the window of ix_jobs_finished_at:
-- its cost follows the jobs finished in it, never the history; the wait is a scalar subquery,
-- one probe of uq_job_attempts_job_id_claim per job (a join was planned as a hash over every
-- attempt ever). A job that ended exactly "now" goes in the last bucket.
SELECT name, bucket,
       count(*) FILTER (WHERE state = 'succeeded')::int AS succeeded,
       count(*) FILTER (WHERE state = 'failed')::int AS failed,
       coalesce(sum(run), 0)::float8 AS run_seconds, count(run)::int AS runs,
       coalesce(sum(wait), 0)::float8 AS wait_seconds, count(wait)::int AS waits
FROM (
    SELECT CASE WHEN :by = 'kind' THEN j.kind ELSE j.queue END AS name,
           least(:buckets - 1, floor(extract(epoch FROM j.finished_at - ({{now}}
                 - make_interval(secs => :window))) / :bucket_seconds))::int AS bucket,
           j.state,
           extract(epoch FROM j.finished_at - j.started_at) AS run,
           (SELECT extract(epoch FROM a.started_at - a.due_at)
            FROM job_attempts AS a WHERE a.job_id = j.id AND a.claim = 1) AS wait
    FROM jobs AS j
    WHERE j.finished_at >= {{now}} - make_interval(secs => :window)
      AND j.state IN ('succeeded', 'failed')
) AS finished
GROUP BY name, bucket
ORDER BY name, bucket

-- name: daily_outcomes
-- The console's charts over days (7 d): the daily rollup (job_daily_rollup, and the wait
-- histogram's buckets for the queue wait), a slice of each primary key from :first_day on;
-- no job row is read. Bucket n is :first_day + n days.
SELECT name, (day - :first_day::date)::int AS bucket,
       sum(succeeded)::int AS succeeded, sum(failed)::int AS failed,
       sum(run_seconds)::float8 AS run_seconds, sum(runs)::int AS runs,
       sum(wait_seconds)::float8 AS wait_seconds, sum(waits)::int AS waits
FROM (
    SELECT CASE WHEN :by = 'kind' THEN kind ELSE queue END AS name, day, succeeded, failed,
           run_seconds, succeeded + failed AS runs, 0.0::float8 AS wait_seconds, 0 AS waits
    FROM job_daily_rollup
    WHERE day >= :first_day::date
    UNION ALL
    SELECT CASE WHEN :by = 'kind' THEN kind ELSE queue END, day, 0, 0, 0.0, 0, seconds * jobs, jobs
    FROM job_daily_histogram
    WHERE day >= :first_day::date AND measure = 'wait'
) AS d
GROUP BY name, day
ORDER BY name, day
