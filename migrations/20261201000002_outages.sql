-- Outages cost nothing (circuit breaker, reconciler, retention).

-- A job waiting for a dependency whose circuit breaker is open: `retrying`
-- without spending its retries; woken when the breaker closes.
ALTER TABLE jobs ADD COLUMN waiting_for text;
ALTER TABLE jobs ADD CONSTRAINT jobs_waiting_for_check
    CHECK (waiting_for IS NULL OR state = 'retrying');
CREATE INDEX jobs_waiting ON jobs (waiting_for) WHERE waiting_for IS NOT NULL;

-- When the reconciler last re-published the job's lost message.
ALTER TABLE jobs ADD COLUMN reconciled_at timestamptz;

-- Jobs that may be waiting for a message: what the reconciler counts.
CREATE INDEX jobs_waiting_for_message ON jobs (queue, state)
    WHERE state IN ('pending', 'retrying');

-- The job an outbox row announces, so "has this job an unsent message?" is
-- an index lookup (the reconciler, waking waiting jobs).
ALTER TABLE outbox ADD COLUMN job_id uuid;
UPDATE outbox SET job_id = (payload->>'job_id')::uuid WHERE sent_at IS NULL;
CREATE INDEX outbox_unsent_job ON outbox (job_id) WHERE sent_at IS NULL;

-- Retention prunes by time; these columns only grow, so a BRIN index is
-- enough and costs next to nothing on insert.
CREATE INDEX job_events_at ON job_events USING brin (at);
CREATE INDEX notifications_read ON notifications (read_at) WHERE read_at IS NOT NULL;

-- The state of each process's circuit breakers, for the dashboard card: a
-- dependency is down while any process that probed it lately finds it down.
CREATE TABLE dependency_status (
    dependency    text NOT NULL,
    process       text NOT NULL,
    up            boolean NOT NULL,
    next_probe_at timestamptz,
    error         text,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dependency, process)
);
