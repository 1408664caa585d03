-- The retention of quarantine records (fencegate.Compactor's
-- CompactQuarantine) deletes the records whose last attempt is older than its
-- age, oldest first: this index lets each of its statements read only the
-- records it deletes (and skips), instead of the whole table.

-- +goose Up
CREATE INDEX fence_quarantine_by_last_at ON fence_quarantine (last_at, quarantine_id);

-- +goose Down
DROP INDEX fence_quarantine_by_last_at;
