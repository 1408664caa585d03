-- Who sent a refused delegated write: the delegate its Fence-Delegation
-- names (the caller, checked by the gateway) and that delegation's ID,
-- recorded when its quarantine record is written and never changed (a
-- repeat counted on the record keeps its first sender). '' when the grant's
-- owner sent it, and for every record written before they were recorded.
-- Not part of the record's identity (quarantine_id).

-- +goose Up
ALTER TABLE fence_quarantine
    ADD COLUMN delegate text NOT NULL DEFAULT '',
    ADD COLUMN delegation_id text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE fence_quarantine
    DROP COLUMN delegation_id,
    DROP COLUMN delegate;
