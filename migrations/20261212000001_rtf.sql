-- Rich Text Format (parser::Kind::Rtf).
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
    'image/png', 'image/jpeg', 'image/tiff', 'message/rfc822',
    'application/rtf'
));
