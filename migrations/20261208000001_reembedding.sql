-- Re-embedding after a change of the deployment's embedding model
-- (docflow::pipeline::reembed): the documents still holding vectors of an
-- earlier model, each re-embedded in the background by a worker with the
-- chosen one, chunk batch by chunk batch, under a lease.

-- Finds the chunks of a model (those left to re-embed) without a scan.
CREATE INDEX chunks_model ON chunks (model_id, document_id) WHERE model_id IS NOT NULL;

-- The run: one row, the model re-embedded to and those it replaces.
CREATE TABLE reembed_run (
    only_row    boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    model_id    smallint NOT NULL REFERENCES embedding_models (id),
    from_models smallint[] NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT now(),
    -- When the documents holding earlier vectors were last listed.
    swept_at    timestamptz,
    -- Every earlier vector replaced and their indexes dropped.
    finished_at timestamptz,
    -- Paused by an admin: workers take no further document.
    paused      boolean NOT NULL DEFAULT false
);

-- One row per document of the run.
CREATE TABLE reembeds (
    document_id uuid PRIMARY KEY REFERENCES documents (id) ON DELETE CASCADE,
    tenant_id   uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    model_id    smallint NOT NULL REFERENCES embedding_models (id),
    state       text NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done', 'failed')),
    -- Runs started (a worker killed half-way counts one).
    attempts    integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    -- Chunks this run re-embedded.
    chunks      integer NOT NULL DEFAULT 0,
    due_at      timestamptz NOT NULL DEFAULT now(),
    lease_owner text,
    lease_until timestamptz,
    last_error  text,
    queued_at   timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    CHECK ((state = 'pending') = (finished_at IS NULL))
);
CREATE INDEX reembeds_due ON reembeds (due_at) WHERE state = 'pending';
CREATE INDEX reembeds_finished ON reembeds (finished_at) WHERE state = 'done';
