-- The same rules, cheaper to keep on the hot path. PostgreSQL reads and
-- plans every CHECK constraint of a table again for each statement that
-- writes to it (jobs had nine, and each job's run updates it five times),
-- and checks each foreign key of an inserted row with a query of its own.
--
-- 1. A single column's rule moves into a domain: a domain's check is kept
--    planned in the type cache, and it runs only when that column is
--    assigned. The values allowed are unchanged. (The rules that tie
--    columns together stay on their tables; so does `chunks`' one rule:
--    changing a column's type rewrites its table, and chunks is the
--    largest.)
-- 2. The tenant of an event or a chunk is its job's or its document's,
--    whose own foreign keys cascade from `tenants`: those two checks only
--    repeated them (deleting a tenant still deletes its events and chunks).

CREATE DOMAIN queue_name AS text CHECK (VALUE IN ('high', 'normal', 'slow'));
CREATE DOMAIN step_name AS text CHECK (VALUE IN ('parse', 'chunk', 'embed', 'store'));
CREATE DOMAIN step_state AS text CHECK (VALUE IN ('pending', 'running', 'done', 'failed'));
CREATE DOMAIN failure_kind AS text CHECK (VALUE IN ('permanent', 'exhausted', 'crashed'));
CREATE DOMAIN tally AS integer CHECK (VALUE >= 0);
CREATE DOMAIN label AS text CHECK (length(VALUE) BETWEEN 1 AND 255);
CREATE DOMAIN document_type AS text
    CHECK (VALUE IN ('application/pdf', 'text/plain', 'text/markdown', 'text/html'));
CREATE DOMAIN byte_size AS bigint CHECK (VALUE > 0);
CREATE DOMAIN sha256_digest AS bytea CHECK (length(VALUE) = 32);

ALTER TABLE documents
    DROP CONSTRAINT documents_filename_check,
    DROP CONSTRAINT documents_content_type_check,
    DROP CONSTRAINT documents_size_bytes_check,
    DROP CONSTRAINT documents_sha256_check,
    DROP CONSTRAINT documents_pages_check,
    DROP CONSTRAINT documents_idempotency_key_check,
    ALTER COLUMN filename TYPE label,
    ALTER COLUMN content_type TYPE document_type,
    ALTER COLUMN size_bytes TYPE byte_size,
    ALTER COLUMN sha256 TYPE sha256_digest,
    ALTER COLUMN pages TYPE tally,
    ALTER COLUMN idempotency_key TYPE label;

ALTER TABLE jobs
    DROP CONSTRAINT jobs_queue_check,
    DROP CONSTRAINT jobs_current_step_check,
    DROP CONSTRAINT jobs_failure_kind_check,
    DROP CONSTRAINT jobs_attempt_check,
    DROP CONSTRAINT jobs_retries_check,
    DROP CONSTRAINT jobs_crashes_check,
    ALTER COLUMN queue TYPE queue_name,
    ALTER COLUMN current_step TYPE step_name,
    ALTER COLUMN failure_kind TYPE failure_kind,
    ALTER COLUMN attempt TYPE tally,
    ALTER COLUMN retries TYPE tally,
    ALTER COLUMN crashes TYPE tally;

ALTER TABLE job_steps
    DROP CONSTRAINT job_steps_step_check,
    DROP CONSTRAINT job_steps_state_check,
    ALTER COLUMN step TYPE step_name,
    ALTER COLUMN state TYPE step_state;

ALTER TABLE job_events DROP CONSTRAINT job_events_tenant_id_fkey;
ALTER TABLE chunks DROP CONSTRAINT chunks_tenant_id_fkey;
