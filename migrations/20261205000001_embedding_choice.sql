-- The embedding model the deployment has chosen, recorded once for every
-- process: during a rolling deploy, processes with different settings run
-- side by side, and a worker whose model is not the chosen one must not
-- write vectors (docflow::pipeline::vectors). The newest process to start
-- records its model here.
CREATE TABLE embedding_choice (
    only_row  boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    model_id  smallint NOT NULL REFERENCES embedding_models (id),
    chosen_at timestamptz NOT NULL DEFAULT now()
);

-- The guard behind the workers' own check: a vector is stored only as the
-- chosen model's, whatever a worker with stale settings tries.
CREATE FUNCTION chunks_model_is_chosen() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    chosen smallint := (SELECT model_id FROM embedding_choice);
BEGIN
    IF chosen IS NOT NULL AND NEW.model_id <> chosen THEN
        RAISE EXCEPTION 'vectors of embedding model % are not stored: the deployment has chosen model %',
            NEW.model_id, chosen
            USING ERRCODE = 'check_violation', HINT = 'this process runs with other embedding settings than the newest one started';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER chunks_model_is_chosen
    BEFORE UPDATE OF model_id ON chunks
    FOR EACH ROW WHEN (NEW.model_id IS NOT NULL AND NEW.model_id IS DISTINCT FROM OLD.model_id)
    EXECUTE FUNCTION chunks_model_is_chosen();
