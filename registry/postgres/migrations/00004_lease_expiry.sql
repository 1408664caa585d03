-- Lease records by expiry: an acquisition deletes the records whose
-- expiry + retention has passed (leaserule.Forgotten) through this index.

-- +goose Up
CREATE INDEX IF NOT EXISTS registry_leases_expires_at ON registry_leases (expires_at);

-- +goose Down
DROP INDEX IF EXISTS registry_leases_expires_at;
