-- The relay's wake-up notice names the newest row its statement inserted,
-- so a relay can skip a notice for a row it has already published (the
-- notice often arrives after the claim that took the row).
CREATE OR REPLACE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('docflow_outbox', coalesce((SELECT max(id)::text FROM inserted), ''));
    RETURN NULL;
END $$;
DROP TRIGGER outbox_notify ON outbox;
CREATE TRIGGER outbox_notify AFTER INSERT ON outbox
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();
