-- +goose Up
-- One quarantine record per distinct refused request, keeping its target,
-- method, effect key, payload size and (when it fits the gateway's bound) the
-- payload itself; repeats count in attempts and move last_at.
ALTER TABLE fence_quarantine
    ADD COLUMN quarantine_id text COLLATE "C",
    ADD COLUMN target        text    NOT NULL DEFAULT '',
    ADD COLUMN method        text    NOT NULL DEFAULT '',
    ADD COLUMN effect_key    text    NOT NULL DEFAULT '',
    ADD COLUMN payload_size  bigint  NOT NULL DEFAULT 0,
    -- NULL: the payload was not kept (over the bound); the digest and size are.
    ADD COLUMN payload       bytea,
    ADD COLUMN last_at       timestamptz,
    ADD COLUMN attempts      integer NOT NULL DEFAULT 1;

-- Rows written before kept one per attempt, without target or method: merge
-- the repeats into the first and name each record as fencegate.QuarantineID
-- does (its parts joined by NUL bytes, target, method and effect key empty).
WITH groups AS (
    SELECT min(id) AS first, count(*) AS n, max(at) AS last
    FROM fence_quarantine GROUP BY resource, fence_token, segment, payload_digest
)
UPDATE fence_quarantine q SET attempts = g.n, last_at = g.last FROM groups g WHERE q.id = g.first;
DELETE FROM fence_quarantine WHERE last_at IS NULL;
UPDATE fence_quarantine SET quarantine_id = 'q_' || left(encode(sha256(
    convert_to(resource, 'UTF8') || '\x00'::bytea ||
    convert_to(fence_token::text, 'UTF8') || '\x00'::bytea ||
    convert_to(segment::text, 'UTF8') || '\x00'::bytea ||
    '\x00'::bytea || '\x00'::bytea || '\x00'::bytea ||
    convert_to(payload_digest, 'UTF8') || '\x00'::bytea), 'hex'), 32);
ALTER TABLE fence_quarantine
    ALTER COLUMN quarantine_id SET NOT NULL,
    ALTER COLUMN last_at SET NOT NULL;
CREATE UNIQUE INDEX fence_quarantine_by_id ON fence_quarantine (quarantine_id);
DROP INDEX fence_quarantine_by_resource;
CREATE INDEX fence_quarantine_by_resource ON fence_quarantine (resource, at, quarantine_id);

-- +goose Down
DROP INDEX fence_quarantine_by_resource;
CREATE INDEX fence_quarantine_by_resource ON fence_quarantine (resource, at, id);
DROP INDEX fence_quarantine_by_id;
ALTER TABLE fence_quarantine
    DROP COLUMN quarantine_id, DROP COLUMN target, DROP COLUMN method, DROP COLUMN effect_key,
    DROP COLUMN payload_size, DROP COLUMN payload, DROP COLUMN last_at, DROP COLUMN attempts;
