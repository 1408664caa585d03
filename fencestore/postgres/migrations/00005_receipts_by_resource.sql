-- +goose Up
-- Receipts of one resource, paged in (created_at, receipt_id) order.
CREATE INDEX fence_receipts_by_resource ON fence_receipts (resource, created_at, receipt_id);

-- +goose Down
DROP INDEX fence_receipts_by_resource;
