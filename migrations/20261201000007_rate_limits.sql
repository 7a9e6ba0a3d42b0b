-- Deployment-wide rate limits (DOCFLOW_EMBED_RPS): one row per limit
-- holding its theoretical arrival time (GCRA). Every worker process takes
-- the next slot with one call; the slot is at least one interval after the
-- previous one, whichever process took it.
CREATE TABLE rate_limits (
    name text PRIMARY KEY,
    tat  timestamptz NOT NULL
);

-- Reserves the next slot of `p_name`, spaced `p_interval_us` apart, and
-- returns how many microseconds the caller waits for it (0: now).
CREATE FUNCTION docflow_rate_slot(p_name text, p_interval_us bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    now_ts timestamptz := clock_timestamp();
    slot   timestamptz;
BEGIN
    INSERT INTO rate_limits (name, tat) VALUES (p_name, now_ts) ON CONFLICT (name) DO NOTHING;
    SELECT greatest(tat, now_ts) INTO slot FROM rate_limits WHERE name = p_name FOR UPDATE;
    UPDATE rate_limits SET tat = slot + p_interval_us * interval '1 microsecond' WHERE name = p_name;
    RETURN greatest(0, (extract(epoch FROM slot - now_ts) * 1000000)::bigint);
END $$;
