-- Poison pills: how often a worker died while running the job (the lease
-- sweeper found its lease expired without a finish). At DOCFLOW_MAX_CRASHES
-- the sweeper fails the job with failure_kind 'crashed' and records its dead
-- letter; it is never claimed again until an admin re-enqueues it.
ALTER TABLE jobs ADD COLUMN crashes integer NOT NULL DEFAULT 0 CHECK (crashes >= 0);

ALTER TABLE jobs DROP CONSTRAINT jobs_failure_kind_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_failure_kind_check
    CHECK (failure_kind IN ('permanent', 'exhausted', 'crashed'));
