-- Credentials that end: API tokens with an optional expiry and a revocation
-- time (kept, so `docflow token list` shows what was revoked and when), and
-- a per-user time before which every session login is void (set by a
-- password change).
ALTER TABLE api_tokens
    ADD COLUMN expires_at timestamptz,
    ADD COLUMN revoked_at timestamptz;

ALTER TABLE users ADD COLUMN sessions_valid_after timestamptz;
