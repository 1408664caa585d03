-- The incarnation marker: written by the registry that claimed this database,
-- in the same row as the revision and the floor, so a restored or replaced
-- database shows another (or no) marker, or an older revision.

-- +goose Up
ALTER TABLE registry_meta
    ADD COLUMN IF NOT EXISTS incarnation       text          NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS incarnation_since NUMERIC(20,0) NOT NULL DEFAULT 0
        CHECK (incarnation_since BETWEEN 0 AND 18446744073709551615);

-- +goose Down
ALTER TABLE registry_meta DROP COLUMN IF EXISTS incarnation, DROP COLUMN IF EXISTS incarnation_since;
