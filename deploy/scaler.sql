-- jobq: the autoscaler's role (PostgreSQL): may call jobq_slots_needed and nothing else.
--
-- Creates jobq_scaler, a NOLOGIN group role that may EXECUTE jobq_slots_needed(text[], text[])
-- (migration 0010: the slots that due, runnable work of given queues and kinds needs). The
-- function is SECURITY DEFINER, so the role needs no table: it reads no job, payload or token.
--
-- Run it after `jobq migrate`, as the role that ran the migrations, in jobq's database:
--
--     psql "$JOBQ_DATABASE_URL" -v ON_ERROR_STOP=1 -f deploy/scaler.sql
--
-- then give KEDA a login in it (its URL goes into the Secret jobq-scaler-database, key url, that
-- the TriggerAuthentication in deploy/k8s reads):
--
--     CREATE ROLE keda_jobq LOGIN PASSWORD '...' IN ROLE jobq_scaler;
--     ALTER ROLE keda_jobq SET default_transaction_read_only = on;
--     ALTER ROLE keda_jobq SET statement_timeout = '5s';
--
-- Idempotent: run it again after an upgrade. Creating the role needs CREATEROLE the first time.

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'jobq_scaler') THEN
        BEGIN
            CREATE ROLE jobq_scaler NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- created by a concurrent run between the check and here
        END;
    END IF;
    -- A role of that name that can do more (log in by itself, bypass row security...) is not this one.
    IF EXISTS (SELECT FROM pg_catalog.pg_roles
               WHERE rolname = 'jobq_scaler'
                 AND (rolcanlogin OR rolsuper OR rolcreatedb OR rolcreaterole OR rolreplication OR rolbypassrls)) THEN
        RAISE EXCEPTION 'role jobq_scaler exists with LOGIN or another attribute; expected NOLOGIN and nothing else';
    END IF;
    -- Whatever was granted to it on tables before (by hand) goes: it reads through the function only.
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA %I FROM jobq_scaler', current_schema());
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO jobq_scaler', current_database());
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO jobq_scaler', current_schema());
END
$$;

GRANT EXECUTE ON FUNCTION jobq_slots_needed(text[], text[]) TO jobq_scaler;
