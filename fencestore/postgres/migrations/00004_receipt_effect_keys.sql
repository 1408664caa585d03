-- The worker's own key for an effect (Fence-Effect-Key, for example an SDK's
-- idempotency key), so that a recovering worker finds the effect by
-- operation ID; '' for none.

-- +goose Up
ALTER TABLE fence_receipts
    ADD COLUMN effect_key text NOT NULL DEFAULT '' CHECK (length(effect_key) <= 255);

-- +goose Down
ALTER TABLE fence_receipts
    DROP COLUMN effect_key;
