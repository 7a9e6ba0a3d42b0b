-- Names that say what the two general domains of 20261203000001 allow:
-- `tally` is any count that cannot go below zero, `label` any short
-- text of 1 to 255 characters (filenames, idempotency keys). A rename
-- changes only the catalog; no table is read or rewritten.
ALTER DOMAIN tally RENAME TO non_negative;
ALTER DOMAIN non_negative RENAME CONSTRAINT tally_check TO non_negative_check;
ALTER DOMAIN label RENAME TO short_text;
ALTER DOMAIN short_text RENAME CONSTRAINT label_check TO short_text_check;
