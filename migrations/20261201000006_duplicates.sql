-- An upload is checked against the tenant's earlier uploads of the same
-- bytes, to flag (or, when asked, refuse) a duplicate.
CREATE INDEX documents_tenant_sha256 ON documents (tenant_id, sha256) WHERE deleted_at IS NULL;
