-- Operator and user controls: a terminal `cancelled` state, and documents
-- that were deleted (their blobs, text and chunks are gone; the row stays
-- so their jobs remain as history).
ALTER TYPE job_state ADD VALUE IF NOT EXISTS 'cancelled';

ALTER TABLE documents ADD COLUMN deleted_at timestamptz;

-- finished_at is set exactly when the job is terminal, `cancelled` included
-- (compared as text: the new value cannot be used as an enum literal in the
-- transaction that adds it).
ALTER TABLE jobs DROP CONSTRAINT jobs_check1;
ALTER TABLE jobs ADD CONSTRAINT jobs_finished_when_terminal
    CHECK ((state::text IN ('done', 'failed', 'cancelled')) = (finished_at IS NOT NULL));
