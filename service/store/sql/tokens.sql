-- name: create_token
-- A new API token, stored by its hash only (the caller shows the token once).
INSERT INTO api_tokens (id, tenant, name, token_hash, created_at, admin, read_only)
VALUES (:id, :tenant, :name, :token_hash, {{now}}, :admin, :read_only)
RETURNING id, tenant, name, created_at, revoked_at, admin, read_only

-- name: revoke_token
-- Revoke a token; revoking twice keeps the first instant.
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, {{now}})
WHERE id = :id
RETURNING id, tenant, name, created_at, revoked_at, admin, read_only

-- fragment: live_tenant_token(t)
-- The one home of "this token may act for its tenant" (api_tokens alias t): not revoked,
-- and not an operator's (an admin token is no tenant's: /v1 refuses it like an unknown one).
{t}.revoked_at IS NULL AND NOT {t}.admin

-- fragment: live_admin_token(t)
-- "This token may use the console" (api_tokens alias t): not revoked, an operator's.
{t}.revoked_at IS NULL AND {t}.admin
