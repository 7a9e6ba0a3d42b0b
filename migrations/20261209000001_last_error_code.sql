-- What kind of failure a job's last_error is (app::dto::FailureCode), so
-- that the API's readers and the UI's words need not read the text. Jobs
-- that failed before it are left without one: their text stays as it was.
ALTER TABLE jobs ADD COLUMN last_error_code text
    CONSTRAINT jobs_last_error_code_known CHECK (last_error_code IN (
        'encrypted', 'damaged', 'no_text', 'not_utf8', 'unsupported_type', 'too_large',
        'unsafe', 'refused', 'unavailable', 'rate_limited', 'temporary', 'crashed',
        'undeliverable', 'internal'
    ));
