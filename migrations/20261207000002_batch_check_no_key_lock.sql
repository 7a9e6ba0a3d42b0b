-- A batch's check locks its row FOR NO KEY UPDATE instead of FOR UPDATE.
-- A job's end runs the check from its state trigger after its own update
-- has re-checked the job's key to the batch, which PostgreSQL does when the
-- job's row was already written in the same transaction (as a step's is):
-- a key-share lock on the batch row. FOR UPDATE conflicts with key-share
-- locks, so two jobs of one batch ending at once, or a job ending while the
-- batch is closed, each waited for the other and PostgreSQL failed one (a
-- 500 to the close, a step retried). FOR NO KEY UPDATE does not conflict
-- with them, and still lets one check at a time change the batch, so of
-- two jobs ending at once the second to commit sees the first.
CREATE OR REPLACE FUNCTION docflow_batch_check(p_batch uuid) RETURNS void
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
    PERFORM pg_notify('docflow_batch', p_batch::text);
END $$;
