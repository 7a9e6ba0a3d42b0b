-- Batches: a folder of uploads handed over as one unit, done when it is
-- closed and every job in it has ended.
CREATE TABLE batches (
    id           uuid PRIMARY KEY,
    tenant_id    uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    created_by   uuid REFERENCES users (id) ON DELETE SET NULL,
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    -- open: taking uploads; running: has jobs or is closed with jobs
    -- unfinished; done / cancelled: closed and every job ended.
    state        text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'running', 'done', 'cancelled')),
    closed_at    timestamptz,
    cancelled_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    CHECK ((state IN ('done', 'cancelled')) = (finished_at IS NOT NULL)),
    CHECK (state NOT IN ('done', 'cancelled') OR closed_at IS NOT NULL)
);
CREATE INDEX batches_tenant_created ON batches (tenant_id, created_at DESC);

ALTER TABLE jobs ADD COLUMN batch_id uuid REFERENCES batches (id) ON DELETE SET NULL;
CREATE INDEX jobs_batch ON jobs (batch_id, state) WHERE batch_id IS NOT NULL;

-- Webhook endpoints, per tenant.
CREATE TABLE webhook_endpoints (
    id              uuid PRIMARY KEY,
    tenant_id       uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    url             text NOT NULL CHECK (length(url) <= 2048),
    events          text[] NOT NULL CHECK (cardinality(events) > 0),
    description     text NOT NULL DEFAULT '' CHECK (length(description) <= 500),
    -- The signing secret (shown once, at registration).
    secret          text NOT NULL,
    created_by      uuid REFERENCES users (id) ON DELETE SET NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Set when the endpoint kept failing (or was deleted: it is then gone).
    disabled_at     timestamptz,
    disabled_reason text,
    last_success_at timestamptz
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id);

-- What happened, once per event whatever the number of endpoints; `body` is
-- rendered at the first delivery attempt and kept, so every retry sends the
-- same bytes under the same `Docflow-Event-Id`.
CREATE TABLE webhook_events (
    id          uuid PRIMARY KEY,
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    type        text NOT NULL,
    job_id      uuid,
    batch_id    uuid,
    document_id uuid,
    -- The job's or batch's state the event announces (`done`, `failed`, …).
    state       text,
    body        text,
    -- The moment of the change (not its transaction's start).
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- The outbox of webhook deliveries: one row per event and endpoint, claimed
-- with SKIP LOCKED and a lease, retried with backoff, never sent from
-- inside a request.
CREATE TABLE webhook_deliveries (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    endpoint_id     uuid NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event_id        uuid NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    state           text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_until     timestamptz,
    last_status     integer,
    last_latency_ms integer,
    last_response   text,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    -- Set by an admin's redeliver: the retry period starts again from it.
    redelivered_at  timestamptz,
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at DESC);

-- Records an event for the tenant's enabled endpoints that subscribe to it,
-- in the caller's transaction (nothing when none does).
CREATE FUNCTION docflow_webhook_event(p_tenant uuid, p_type text, p_job uuid, p_batch uuid,
                                      p_document uuid, p_state text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    ev uuid := gen_random_uuid();
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints
                   WHERE tenant_id = p_tenant AND disabled_at IS NULL AND p_type = ANY (events)) THEN
        RETURN;
    END IF;
    INSERT INTO webhook_events (id, tenant_id, type, job_id, batch_id, document_id, state)
    VALUES (ev, p_tenant, p_type, p_job, p_batch, p_document, p_state);
    INSERT INTO webhook_deliveries (endpoint_id, event_id)
    SELECT id, ev FROM webhook_endpoints
    WHERE tenant_id = p_tenant AND disabled_at IS NULL AND p_type = ANY (events);
    PERFORM pg_notify('docflow_webhooks', '');
END $$;

-- Batches whose jobs changed state, to be checked (`batches::run_checker`)
-- once that change has committed. A job's transaction only appends here:
-- it never waits for a batch's row, so jobs of one batch ending together
-- (in one group commit or in several) never wait on each other.
CREATE TABLE batch_checks (
    id       bigserial PRIMARY KEY,
    batch_id uuid NOT NULL
);

-- Brings a batch's state up to date after one of its jobs changed state or
-- it was closed: done (or cancelled) once closed with every job ended, and
-- running again when a retry brings a job of a finished batch back. The
-- batch row is locked first (as an UPDATE locks it), so two checks of one
-- batch run one after the other and the second sees the first.
CREATE FUNCTION docflow_batch_check(p_batch uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    b batches%ROWTYPE;
    unfinished bigint;
BEGIN
    SELECT * INTO b FROM batches WHERE id = p_batch FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT count(*) INTO unfinished FROM jobs
    WHERE batch_id = p_batch AND state IN ('pending', 'processing', 'retrying');
    IF unfinished > 0 THEN
        IF b.state IN ('open', 'done', 'cancelled') THEN
            UPDATE batches SET state = 'running', finished_at = NULL, cancelled_at = NULL
            WHERE id = p_batch;
        END IF;
    ELSIF b.closed_at IS NOT NULL AND b.state NOT IN ('done', 'cancelled') THEN
        UPDATE batches
        SET state = CASE WHEN cancelled_at IS NULL THEN 'done' ELSE 'cancelled' END,
            finished_at = clock_timestamp()
        WHERE id = p_batch
        RETURNING * INTO b;
        PERFORM docflow_webhook_event(b.tenant_id, 'batch.done', NULL, p_batch, NULL, b.state);
    END IF;
END $$;

CREATE FUNCTION docflow_job_state_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('done', 'failed', 'cancelled') THEN
        PERFORM docflow_webhook_event(NEW.tenant_id, 'job.' || NEW.state::text, NEW.id, NEW.batch_id,
                                      NEW.document_id, NEW.state::text);
    END IF;
    IF NEW.batch_id IS NOT NULL THEN
        INSERT INTO batch_checks (batch_id) VALUES (NEW.batch_id);
        PERFORM pg_notify('docflow_batch_checks', '');
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER jobs_state_changed AFTER UPDATE OF state ON jobs
FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)
EXECUTE FUNCTION docflow_job_state_changed();

-- Tenant admins are told when an endpoint was disabled.
ALTER TABLE notifications DROP CONSTRAINT notifications_kind_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_kind_check
    CHECK (kind IN ('job_done', 'job_failed', 'job_cancelled', 'webhook_disabled'));

CREATE FUNCTION docflow_document_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM docflow_webhook_event(NEW.tenant_id, 'document.deleted',
                                  (SELECT id FROM jobs WHERE document_id = NEW.id), NULL, NEW.id, 'deleted');
    RETURN NULL;
END $$;

CREATE TRIGGER documents_deleted AFTER UPDATE OF deleted_at ON documents
FOR EACH ROW WHEN (OLD.deleted_at IS NULL AND NEW.deleted_at IS NOT NULL)
EXECUTE FUNCTION docflow_document_deleted();
