-- Who made a delegated write: the delegate its Fence-Delegation names (the
-- caller, checked by the gateway) and that delegation's ID, recorded at
-- admission. '' for the grant owner's own writes, and for every receipt
-- admitted before they were recorded. Not part of the segment's identity
-- (fence_receipts_live and the replay rule do not look at them).

-- +goose Up
ALTER TABLE fence_receipts
    ADD COLUMN delegate text NOT NULL DEFAULT '',
    ADD COLUMN delegation_id text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE fence_receipts
    DROP COLUMN delegation_id,
    DROP COLUMN delegate;
