-- name: create_token
INSERT INTO api_tokens (id, tenant, name, token_hash, created_at, admin)
VALUES (:id, :tenant, :name, :token_hash, {{now}}, :admin)
RETURNING id, tenant, name, created_at, revoked_at, admin

-- name: revoke_token
UPDATE api_tokens SET revoked_at = coalesce(revoked_at, {{now}})
WHERE id = :id
RETURNING id, tenant, name, created_at, revoked_at, admin
