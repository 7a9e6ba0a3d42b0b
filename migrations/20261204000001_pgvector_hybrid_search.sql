-- Vectors in pgvector, each recording the model that made it, and a
-- full-text vector beside every chunk, so that search fuses a lexical and a
-- semantic ranking (docflow::search).
--
-- pgvector is not in every PostgreSQL: scripts/install-pgvector.sh builds
-- it here, and docflow checks that it is available before migrating.
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS unaccent;

-- English stemming and stop words, with accents folded first, so that
-- "creme brulee" finds "crème brûlée".
CREATE TEXT SEARCH CONFIGURATION docflow (COPY = pg_catalog.english);
ALTER TEXT SEARCH CONFIGURATION docflow
    ALTER MAPPING FOR hword, hword_part, word WITH unaccent, english_stem;

-- Every embedding model whose vectors docflow has stored. The configured
-- one is registered at start (docflow::pipeline::vectors); its vectors get
-- an HNSW index of their own, built then without blocking writes.
CREATE TABLE embedding_models (
    id         smallint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text NOT NULL UNIQUE CHECK (name <> ''),
    dims       integer NOT NULL CHECK (dims BETWEEN 1 AND 16000),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Vectors stored before models were recorded cannot be told apart (the
-- default embedder changes with this version): they are kept, but no
-- search reads them until their documents are embedded again. Full-text
-- search finds those documents meanwhile.
ALTER TABLE chunks
    ALTER COLUMN embedding TYPE vector USING embedding::vector,
    ADD COLUMN model_id smallint REFERENCES embedding_models (id),
    ADD COLUMN page integer CHECK (page >= 1),
    ADD COLUMN tsv tsvector GENERATED ALWAYS AS (to_tsvector('docflow'::regconfig, text)) STORED;
COMMENT ON COLUMN chunks.embedding IS 'L2-normalised; its model and dimensions are model_id''s';
CREATE INDEX chunks_tsv ON chunks USING gin (tsv);
-- The exact ranking a small tenant's search takes (the planner picks it
-- over the HNSW index when the tenant has few chunks).
CREATE INDEX chunks_tenant_model ON chunks (tenant_id, model_id);
DROP INDEX chunks_tenant;
