-- Word documents, slide decks and e-books (parser::Kind): the document
-- types a document row may hold, one per kind the parser reads.
ALTER DOMAIN document_type DROP CONSTRAINT document_type_check;
ALTER DOMAIN document_type ADD CONSTRAINT document_type_check CHECK (VALUE IN (
    'application/pdf', 'text/plain', 'text/markdown', 'text/html',
    'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
    'application/vnd.openxmlformats-officedocument.presentationml.presentation',
    'application/vnd.oasis.opendocument.text',
    'application/vnd.oasis.opendocument.presentation',
    'application/epub+zip'
));
