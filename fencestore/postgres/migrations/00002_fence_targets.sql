-- +goose Up
-- The resource each target is fenced under: nested resources are separate
-- fence lines, so a target belongs to the first one that admitted it.
CREATE TABLE fence_targets (
    target   text COLLATE "C" PRIMARY KEY,
    resource text COLLATE "C" NOT NULL
);
INSERT INTO fence_targets (target, resource)
    SELECT DISTINCT ON (target) target, resource FROM fence_receipts ORDER BY target, created_at;

-- +goose Down
DROP TABLE fence_targets;
