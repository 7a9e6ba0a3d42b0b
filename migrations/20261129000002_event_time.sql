-- An event's time is when it was recorded, not when its transaction began:
-- a step's "done" event no longer carries the time the step's transaction
-- opened, so timeline durations and delivery latency are measured right.
ALTER TABLE job_events ALTER COLUMN at SET DEFAULT clock_timestamp();
