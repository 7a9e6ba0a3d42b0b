-- A job cancelled by someone other than its uploader (an administrator)
-- tells the uploader in the inbox.
ALTER TABLE notifications DROP CONSTRAINT notifications_kind_check;
ALTER TABLE notifications ADD CONSTRAINT notifications_kind_check
    CHECK (kind IN ('job_done', 'job_failed', 'job_cancelled'));
