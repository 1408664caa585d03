-- Fence state, receipts, quarantine and committed versions of
-- fencestore/postgres.
--
-- Fences and segment numbers are uint64 in Go. They are kept as NUMERIC(20,0),
-- which holds every uint64 exactly (a bigint would cap them at 2^63-1), each
-- with a CHECK that keeps it in uint64 range. Names and IDs use the "C"
-- collation: byte order, as the embedded store sorts them.

-- +goose Up

-- One row per resource that ever admitted a segment. Admit and Settle lock it
-- (SELECT ... FOR UPDATE) for their whole transaction.
CREATE TABLE fence_resources (
    resource         text COLLATE "C" PRIMARY KEY,
    highest_fence    numeric(20,0)    NOT NULL DEFAULT 0
        CHECK (highest_fence BETWEEN 0 AND 18446744073709551615),
    root             text             NOT NULL DEFAULT '',
    lease            text             NOT NULL DEFAULT '',
    last_segment_seq numeric(20,0)    NOT NULL DEFAULT 0
        CHECK (last_segment_seq BETWEEN 0 AND 18446744073709551615),
    grant_issued_at  bigint           NOT NULL DEFAULT 0,
    -- '' when no effect is in flight.
    pending_receipt  text             NOT NULL DEFAULT '',
    updated_at       timestamptz      NOT NULL DEFAULT now()
);

CREATE TABLE fence_receipts (
    receipt_id     text COLLATE "C" PRIMARY KEY,
    resource       text COLLATE "C" NOT NULL REFERENCES fence_resources (resource),
    target         text COLLATE "C" NOT NULL,
    method         text             NOT NULL,
    fence_token    numeric(20,0)    NOT NULL
        CHECK (fence_token BETWEEN 1 AND 18446744073709551615),
    segment        numeric(20,0)    NOT NULL
        CHECK (segment BETWEEN 1 AND 18446744073709551615),
    operation_id   text COLLATE "C" NOT NULL,
    operation_root text             NOT NULL,
    lease          text             NOT NULL,
    owner          text             NOT NULL,
    grant_digest   text             NOT NULL,
    payload_digest text             NOT NULL,
    state          text             NOT NULL
        CHECK (state IN ('PENDING', 'COMMITTED', 'FAILED', 'UNKNOWN', 'NOT_APPLIED')),
    version        text             NOT NULL DEFAULT '',
    response       jsonb,
    error          text             NOT NULL DEFAULT '',
    created_at     timestamptz      NOT NULL,
    settled_at     timestamptz
);

-- At most one live receipt per segment: FAILED and NOT_APPLIED receipts give
-- their segment number back.
CREATE UNIQUE INDEX fence_receipts_live
    ON fence_receipts (resource, fence_token, segment)
    WHERE state NOT IN ('FAILED', 'NOT_APPLIED');
CREATE INDEX fence_receipts_by_operation ON fence_receipts (operation_id, created_at, receipt_id);
CREATE INDEX fence_receipts_by_state ON fence_receipts (state, created_at, receipt_id);

-- Segments replayed with another payload than the accepted one.
CREATE TABLE fence_quarantine (
    id             bigint           GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource       text COLLATE "C" NOT NULL,
    fence_token    numeric(20,0)    NOT NULL
        CHECK (fence_token BETWEEN 0 AND 18446744073709551615),
    segment        numeric(20,0)    NOT NULL
        CHECK (segment BETWEEN 0 AND 18446744073709551615),
    -- The receipt that was accepted for the segment.
    receipt_id     text COLLATE "C" NOT NULL REFERENCES fence_receipts (receipt_id),
    payload_digest text             NOT NULL,
    owner          text             NOT NULL,
    at             timestamptz      NOT NULL
);
CREATE INDEX fence_quarantine_by_resource ON fence_quarantine (resource, at, id);

-- The backend version last committed for each target.
CREATE TABLE fence_versions (
    target     text COLLATE "C" PRIMARY KEY,
    version    text             NOT NULL,
    updated_at timestamptz      NOT NULL
);

-- +goose Down
DROP TABLE fence_versions;
DROP TABLE fence_quarantine;
DROP TABLE fence_receipts;
DROP TABLE fence_resources;
