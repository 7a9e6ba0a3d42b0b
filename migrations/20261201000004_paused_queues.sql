-- Paused work queues (`POST /api/admin/queues/{queue}/pause`): one row per
-- queue while it is paused, none while it runs. Workers read this table
-- about twice a second and cancel their consumer of a paused queue, so the
-- messages stay ready in RabbitMQ; keeping the state here, not in a
-- process, makes it survive restarts and hold for every worker.
CREATE TABLE paused_queues (
    -- The tier, as `jobs.queue` names it.
    queue     text PRIMARY KEY CHECK (queue IN ('high', 'normal', 'slow')),
    paused_at timestamptz NOT NULL DEFAULT now(),
    -- The admin who paused it (the audit log keeps who, should the user go).
    paused_by uuid REFERENCES users (id) ON DELETE SET NULL
);
