-- A job's dead-letter history (when it was dead, when and by whom it came
-- back) is read with the job, for the job page's "dead for 12 min,
-- re-enqueued by an administrator" and a total time that leaves it out:
-- resolved rows too are looked up by job.
CREATE INDEX dead_letters_job ON dead_letters (job_id, dead_at);
