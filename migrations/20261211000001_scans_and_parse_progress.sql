-- Scans and photos (parser::Kind::Png, Jpeg, Tiff), read by OCR, and
-- e-mail (Kind::Eml); and the
-- pages a job's parse step has read so far, of how many, while it runs
-- (a 300-page manual, a scan recognised page by page).
ALTER DOMAIN document_type DROP CONSTRAINT document_type_check;
ALTER DOMAIN document_type ADD CONSTRAINT document_type_check CHECK (VALUE IN (
    'application/pdf', 'text/plain', 'text/markdown', 'text/html',
    'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
    'application/vnd.openxmlformats-officedocument.presentationml.presentation',
    'application/vnd.oasis.opendocument.text',
    'application/vnd.oasis.opendocument.presentation',
    'application/epub+zip',
    'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
    'application/vnd.oasis.opendocument.spreadsheet',
    'text/csv', 'text/tab-separated-values',
    'image/png', 'image/jpeg', 'image/tiff', 'message/rfc822'
));

ALTER TABLE jobs
    ADD COLUMN pages_parsed integer NOT NULL DEFAULT 0 CHECK (pages_parsed >= 0),
    ADD COLUMN pages_total integer NOT NULL DEFAULT 0 CHECK (pages_total >= 0);
