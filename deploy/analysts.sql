-- jobq: the analysts' read-only role (PostgreSQL).
--
-- Creates jobq_analyst, a NOLOGIN group role that may read the views of the analysts'
-- read model (job_history, attempt_history, job_item_history, and the daily rollup's
-- daily_jobs, daily_histogram, daily_queue_wait, daily_run_time; see docs/ANALYSTS.md) and
-- nothing else: no base table (so never api_tokens.token_hash), no writes.
-- A view runs with its owner's privileges, so SELECT on the view is all it needs.
--
-- Run it after `jobq migrate`, as the role that ran the migrations (the owner
-- of jobq's tables), in jobq's database, with jobq's schema first on the
-- search_path (the default: public):
--
--     psql "$JOBQ_DATABASE_URL" -v ON_ERROR_STOP=1 -f deploy/analysts.sql
--
-- Creating the role needs CREATEROLE (or a superuser) the first time; later
-- runs only re-apply the grants. Idempotent: safe to run twice, and run it again
-- after any migration that recreates a view (a recreated view loses its grants).
--
-- Then give each analyst a login role of their own that is a member of it, and run
-- this script again, which puts the guard rails on every login of the role:
--
--     CREATE ROLE alice LOGIN PASSWORD '...' IN ROLE jobq_analyst;
--     -- or, for an existing role:  GRANT jobq_analyst TO alice;
--     -- recommended too (the views cannot be written anyway; this says so at once):
--     ALTER ROLE alice SET default_transaction_read_only = on;
--
-- The guard rails (docs/ANALYSTS.md, "Guard rails"): an analyst's session holds back
-- vacuum of the queue's tables while a statement runs or a transaction stays open, so
-- every login of jobq_analyst gets, in this database only (ALTER ROLE ... IN DATABASE):
--
--     statement_timeout                    60s  a statement running longer is cancelled
--     idle_in_transaction_session_timeout  30s  a session idle that long in an open
--                                                transaction is ended
--
-- PostgreSQL applies a role's settings only to the role that logs in, never through
-- membership, so the script sets them on each login that is a member (directly or
-- through another role) and records them on jobq_analyst itself, where later runs read
-- them back. To choose other values, set them for the run (PostgreSQL checks them):
--
--     psql "$JOBQ_DATABASE_URL" -v ON_ERROR_STOP=1 \
--         -c "SET jobq.analyst_statement_timeout = '2min'" \
--         -c "SET jobq.analyst_idle_in_transaction_timeout = '1min'" \
--         -f deploy/analysts.sql
--
-- A login that can write jobq's tables (the application's role, a superuser) is never
-- touched, even if it was made a member: the queue's own sessions must not time out.
--
-- Take it away with `REVOKE jobq_analyst FROM alice;`. To remove the role
-- entirely: `REVOKE ALL ON job_history, attempt_history, job_item_history, daily_jobs, daily_histogram,
-- daily_queue_wait, daily_run_time FROM jobq_analyst;
-- REVOKE ALL ON SCHEMA public FROM jobq_analyst; DROP ROLE jobq_analyst;`
-- (plus the CONNECT grant, in each database where the script ran).

-- The group role: created once, never with LOGIN. Roles belong to the whole
-- server, so another database (or a concurrent run) may have created it already.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'jobq_analyst') THEN
        BEGIN
            CREATE ROLE jobq_analyst NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- created by a concurrent run between the check and here
        END;
    END IF;
    -- A role of that name that can do more than read (log in by itself, bypass
    -- row security, create roles...) is not this one: stop rather than grant it.
    IF EXISTS (SELECT FROM pg_catalog.pg_roles
               WHERE rolname = 'jobq_analyst'
                 AND (rolcanlogin OR rolsuper OR rolcreatedb OR rolcreaterole OR rolreplication OR rolbypassrls)) THEN
        RAISE EXCEPTION 'role jobq_analyst exists with LOGIN or another attribute; expected NOLOGIN and nothing else';
    END IF;
END
$$;

-- The guard rails, in one block: a value PostgreSQL refuses stops it before anything changed.
-- The values of this run (jobq.analyst_* set in the session), else those recorded on
-- jobq_analyst by an earlier run, else the defaults.
DO $$
DECLARE
    database_oid oid := (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database());
    jobs_table text := format('%I.jobs', current_schema());
    rails CONSTANT text[][] := ARRAY[
        ARRAY['statement_timeout', 'jobq.analyst_statement_timeout', '60s'],
        ARRAY['idle_in_transaction_session_timeout', 'jobq.analyst_idle_in_transaction_timeout', '30s']];
    setting text;
    recorded text;
    chosen text;
    login record;
BEGIN
    FOR i IN 1 .. array_length(rails, 1) LOOP
        setting := rails[i][1];
        SELECT substr(config, length(setting) + 2) INTO recorded
        FROM pg_catalog.pg_db_role_setting, unnest(setconfig) AS config
        WHERE setrole = 'jobq_analyst'::regrole AND setdatabase = database_oid
          AND config LIKE setting || '=%';
        chosen := coalesce(nullif(current_setting(rails[i][2], true), ''), recorded, rails[i][3]);
        EXECUTE format('ALTER ROLE jobq_analyst IN DATABASE %I SET %I = %L', current_database(), setting, chosen);
        FOR login IN
            WITH RECURSIVE members AS (
                SELECT member FROM pg_catalog.pg_auth_members WHERE roleid = 'jobq_analyst'::regrole
                UNION
                SELECT m.member FROM pg_catalog.pg_auth_members AS m JOIN members ON m.roleid = members.member
            )
            SELECT r.rolname, has_table_privilege(r.oid, jobs_table, 'UPDATE') AS writes_the_queue
            FROM members JOIN pg_catalog.pg_roles AS r ON r.oid = members.member
            WHERE r.rolcanlogin
            ORDER BY r.rolname
        LOOP
            IF login.writes_the_queue THEN
                IF i = 1 THEN
                    RAISE NOTICE 'role % can write jobq''s tables: no guard rails set on it', login.rolname;
                END IF;
                CONTINUE;
            END IF;
            BEGIN
                EXECUTE format('ALTER ROLE %I IN DATABASE %I SET %I = %L',
                               login.rolname, current_database(), setting, chosen);
            EXCEPTION WHEN undefined_object THEN
                NULL;  -- dropped since the loop read it
            END;
        END LOOP;
    END LOOP;
END
$$;

-- Start from nothing in this schema: whatever was granted to the role before
-- (by hand, by an older version of this script) goes.
DO $$
BEGIN
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM jobq_analyst', current_schema());
    EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA %I FROM jobq_analyst', current_schema());
END
$$;

-- Nobody reads or writes jobq's tables through PUBLIC (PostgreSQL grants PUBLIC
-- nothing on tables by default; this undoes a grant someone may have made).
-- The application keeps its access: it connects as the owner.
REVOKE ALL ON TABLE jobs, job_results, job_attempts, job_replays, job_items, workers, api_tokens, alembic_version,
    job_daily_rollup, job_daily_histogram, rollup_watermark, console_sessions, console_audit, job_edges FROM PUBLIC;
REVOKE ALL ON SEQUENCE job_attempts_id_seq, job_replays_id_seq, console_audit_id_seq FROM PUBLIC;
REVOKE ALL ON TABLE job_history, attempt_history, job_item_history, daily_jobs, daily_histogram, daily_queue_wait, daily_run_time, job_dependencies
    FROM PUBLIC;

-- What the role may do: connect, look up names in the schema, read the views.
DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO jobq_analyst', current_database());
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO jobq_analyst', current_schema());
END
$$;
GRANT SELECT ON TABLE job_history, attempt_history, job_item_history, daily_jobs, daily_histogram, daily_queue_wait, daily_run_time, job_dependencies
    TO jobq_analyst;
