-- When every request of the receipt's effect expires at the store: the
-- deadline it was sent with (created_at plus the admitting gateway's
-- effectTimeout), so that any replica reconciles it by that deadline and
-- not by its own effectTimeout. NULL for receipts admitted before it was
-- recorded.

-- +goose Up
ALTER TABLE fence_receipts
    ADD COLUMN land_by timestamptz;

-- +goose Down
ALTER TABLE fence_receipts
    DROP COLUMN land_by;
