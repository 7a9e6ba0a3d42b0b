-- docflow's whole data model. PostgreSQL is the source of truth: RabbitMQ only
-- carries wake-ups that can always be rebuilt from these tables.

CREATE TABLE tenants (
    id          uuid PRIMARY KEY,
    slug        text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    -- 'paid' tenants' jobs go to docflow.jobs.high, 'free' ones to docflow.jobs.normal.
    plan        text NOT NULL CHECK (plan IN ('free', 'paid')),
    -- Unfinished jobs this tenant may have at once; uploads above it get 429.
    -- NULL means no per-tenant limit (the global DOCFLOW_MAX_BACKLOG still applies).
    max_unfinished_jobs integer CHECK (max_unfinished_jobs > 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
    id            uuid PRIMARY KEY,
    tenant_id     uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    email         text NOT NULL UNIQUE CHECK (email = lower(email)),
    -- argon2id PHC string.
    password_hash text NOT NULL,
    role          text NOT NULL CHECK (role IN ('admin', 'member')),
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- Bearer tokens for scripts and CI. Only the SHA-256 of the secret is kept.
CREATE TABLE api_tokens (
    id           uuid PRIMARY KEY,
    user_id      uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    token_sha256 bytea NOT NULL UNIQUE,
    name         text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz
);

CREATE TABLE documents (
    id              uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    uploaded_by     uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    filename        text NOT NULL CHECK (length(filename) BETWEEN 1 AND 255),
    -- Sniffed from the bytes, never trusted from the client.
    content_type    text NOT NULL CHECK (content_type IN ('application/pdf', 'text/plain', 'text/markdown', 'text/html')),
    size_bytes      bigint NOT NULL CHECK (size_bytes > 0),
    sha256          bytea NOT NULL CHECK (length(sha256) = 32),
    -- Page count at upload (PDF pages, or 3,000-byte pages of text); picks the slow queue.
    pages           integer NOT NULL CHECK (pages >= 0),
    blob_key        text NOT NULL,
    -- Set by the parse step.
    text_blob_key   text,
    -- Set by the store step: the document's chunks are searchable.
    indexed_at      timestamptz,
    -- Idempotency-Key of the upload; one per tenant.
    idempotency_key text CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, idempotency_key)
);

CREATE TYPE job_state AS ENUM ('pending', 'processing', 'retrying', 'done', 'failed');

CREATE TABLE jobs (
    id              uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    document_id     uuid NOT NULL UNIQUE REFERENCES documents (id) ON DELETE CASCADE,
    queue           text NOT NULL CHECK (queue IN ('high', 'normal', 'slow')),
    state           job_state NOT NULL DEFAULT 'pending',
    -- Runs started: 1 for the first, so success after two retries ends at 3.
    attempt         integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    -- Retries spent since the last (re-)enqueue by an admin.
    retries         integer NOT NULL DEFAULT 0 CHECK (retries >= 0),
    current_step    text CHECK (current_step IN ('parse', 'chunk', 'embed', 'store')),
    lease_owner     text,
    lease_until     timestamptz,
    -- When a retrying job is due again.
    next_attempt_at timestamptz,
    last_error      text,
    -- 'permanent' or 'exhausted' once failed.
    failure_kind    text CHECK (failure_kind IN ('permanent', 'exhausted')),
    chunks_total    integer NOT NULL DEFAULT 0,
    chunks_embedded integer NOT NULL DEFAULT 0,
    enqueued_at     timestamptz NOT NULL DEFAULT now(),
    started_at      timestamptz,
    finished_at     timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    -- A lease exists exactly while a worker runs the job.
    CHECK ((state = 'processing') = (lease_owner IS NOT NULL AND lease_until IS NOT NULL)),
    -- finished_at is set exactly when the job is terminal.
    CHECK ((state IN ('done', 'failed')) = (finished_at IS NOT NULL))
);
CREATE INDEX jobs_tenant_created ON jobs (tenant_id, enqueued_at DESC, id DESC);
CREATE INDEX jobs_created ON jobs (enqueued_at DESC, id DESC);
-- Covers the per-queue counts and age percentiles (an index-only scan).
CREATE INDEX jobs_unfinished ON jobs (queue, enqueued_at) INCLUDE (state) WHERE state IN ('pending', 'processing', 'retrying');
CREATE INDEX jobs_tenant_unfinished ON jobs (tenant_id) WHERE state IN ('pending', 'processing', 'retrying');
CREATE INDEX jobs_lease ON jobs (lease_until) WHERE state = 'processing';
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;

-- One row per (job, step): the step's state and, once 'done', its checkpoint.
CREATE TABLE job_steps (
    job_id      uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    step        text NOT NULL CHECK (step IN ('parse', 'chunk', 'embed', 'store')),
    state       text NOT NULL CHECK (state IN ('pending', 'running', 'done', 'failed')),
    -- Times this step was started, over all runs of the job.
    attempts    integer NOT NULL DEFAULT 0,
    started_at  timestamptz,
    finished_at timestamptz,
    duration_ms bigint,
    error       text,
    PRIMARY KEY (job_id, step)
);
-- Per-step failure rates over a time window.
CREATE INDEX job_steps_started ON job_steps (started_at);

-- Transactional outbox: rows written with the job change they announce,
-- published by the relay, marked sent only after the broker's confirm.
CREATE TABLE outbox (
    id           bigserial PRIMARY KEY,
    exchange     text NOT NULL,
    routing_key  text NOT NULL,
    payload      jsonb NOT NULL,
    -- Not published before this time: retries with backoff wait here, not in a worker.
    available_at timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz,
    -- Failed publish attempts (unroutable, broker down).
    publish_attempts integer NOT NULL DEFAULT 0,
    last_error   text
);
CREATE INDEX outbox_due ON outbox (available_at, id) WHERE sent_at IS NULL;
CREATE INDEX outbox_sent ON outbox (sent_at) WHERE sent_at IS NOT NULL;

-- Wakes relays as soon as a row is committed; polling covers lost notifications.
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('docflow_outbox', '');
    RETURN NULL;
END $$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

CREATE TABLE dead_letters (
    id          uuid PRIMARY KEY,
    -- NULL when the message could not even be read.
    job_id      uuid REFERENCES jobs (id) ON DELETE CASCADE,
    tenant_id   uuid REFERENCES tenants (id) ON DELETE CASCADE,
    queue       text NOT NULL,
    -- permanent | exhausted | malformed | delivery_limit | rejected
    reason      text NOT NULL,
    error       text NOT NULL,
    attempts    integer NOT NULL,
    payload     text NOT NULL,
    dead_at     timestamptz NOT NULL DEFAULT now(),
    resolved_at timestamptz,
    -- 'requeued' or 'discarded'.
    resolution  text CHECK (resolution IN ('requeued', 'discarded')),
    resolved_by uuid REFERENCES users (id) ON DELETE SET NULL,
    CHECK ((resolved_at IS NULL) = (resolution IS NULL))
);
-- A redelivered dead message must not be recorded twice.
CREATE UNIQUE INDEX dead_letters_one_open_per_job ON dead_letters (job_id) WHERE resolved_at IS NULL;
CREATE INDEX dead_letters_open ON dead_letters (dead_at DESC, id DESC) WHERE resolved_at IS NULL;

CREATE TABLE job_events (
    id         bigserial PRIMARY KEY,
    job_id     uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    tenant_id  uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    state      job_state NOT NULL,
    step       text,
    progress_done  integer,
    progress_total integer,
    message    text NOT NULL,
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_events_job ON job_events (job_id, id);
CREATE INDEX job_events_tenant ON job_events (tenant_id, id);

CREATE TABLE notifications (
    id         uuid PRIMARY KEY,
    user_id    uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    job_id     uuid REFERENCES jobs (id) ON DELETE CASCADE,
    kind       text NOT NULL CHECK (kind IN ('job_done', 'job_failed')),
    title      text NOT NULL,
    body       text NOT NULL,
    link       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    read_at    timestamptz
);
CREATE INDEX notifications_user ON notifications (user_id, created_at DESC);

CREATE TABLE audit_log (
    id         bigserial PRIMARY KEY,
    actor_id   uuid REFERENCES users (id) ON DELETE SET NULL,
    actor_email text NOT NULL,
    action     text NOT NULL,
    target     text NOT NULL,
    detail     jsonb NOT NULL DEFAULT '{}',
    at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE chunks (
    document_id uuid NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    chunk_index integer NOT NULL CHECK (chunk_index >= 0),
    text        text NOT NULL,
    -- L2-normalised embedding (pgvector is not available everywhere docflow runs).
    embedding   real[],
    PRIMARY KEY (document_id, chunk_index)
);
CREATE INDEX chunks_tenant ON chunks (tenant_id);

-- Live worker processes; a row is stale once heartbeat_at is old.
CREATE TABLE workers (
    id           text PRIMARY KEY,
    hostname     text NOT NULL,
    pid          integer NOT NULL,
    queues       text NOT NULL,
    running_jobs uuid[] NOT NULL DEFAULT '{}',
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- Dashboard time series, sampled every 10 s and kept 7 days.
CREATE TABLE metric_samples (
    metric text NOT NULL,
    queue  text NOT NULL DEFAULT '',
    at     timestamptz NOT NULL,
    value  double precision NOT NULL,
    PRIMARY KEY (metric, queue, at)
);
