-- Web processes keep a session's user, with its tenant, for a few seconds.
-- Any change to a user or a tenant, by docflow or by hand, tells every
-- web process to forget it at once ("users:<id>" or "tenants:<id>").
CREATE FUNCTION user_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('docflow_users', TG_TABLE_NAME || ':' || OLD.id::text);
    RETURN NULL;
END $$;
CREATE TRIGGER users_changed AFTER UPDATE OR DELETE ON users
    FOR EACH ROW EXECUTE FUNCTION user_changed();
CREATE TRIGGER tenants_changed AFTER UPDATE OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION user_changed();
