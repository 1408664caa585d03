-- The exact upstream request of an API effect, kept so that the reconciler
-- can resend it under the same idempotency key (NULL for object effects);
-- the number of upstream sends made; and whether the last one ended where the
-- API allows a same-key resend.

-- +goose Up
ALTER TABLE fence_receipts
    ADD COLUMN request  jsonb,
    ADD COLUMN attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    ADD COLUMN resend   boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE fence_receipts
    DROP COLUMN resend,
    DROP COLUMN attempts,
    DROP COLUMN request;
