-- The highest fence ever issued, kept in the meta row by every acquire so the
-- incarnation read is one row, not a scan of every resource. Initialised from
-- the resources for databases that predate it.

-- +goose Up
ALTER TABLE registry_meta
    ADD COLUMN IF NOT EXISTS max_fence NUMERIC(20,0) NOT NULL DEFAULT 0
        CHECK (max_fence BETWEEN 0 AND 18446744073709551615);
UPDATE registry_meta SET max_fence = greatest(max_fence, (SELECT coalesce(max(last_fence), 0) FROM registry_resources));

-- +goose Down
ALTER TABLE registry_meta DROP COLUMN IF EXISTS max_fence;
