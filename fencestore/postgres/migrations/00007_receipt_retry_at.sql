-- The moment before which an UNKNOWN receipt is not resent: its upstream's
-- last answer asked to wait (an in-progress answer's Retry-After). NULL for none.

-- +goose Up
ALTER TABLE fence_receipts
    ADD COLUMN retry_at timestamptz;

-- +goose Down
ALTER TABLE fence_receipts
    DROP COLUMN retry_at;
