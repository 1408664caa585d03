-- The lease registry. Fences, revisions and the floor are uint64 kept in
-- NUMERIC(20,0) with a range check, so the whole uint64 space is usable.
--
-- Applied with goose (internal/pgmigrate, version table registry_migrations).
-- Databases created before goose took over carry these tables already,
-- recorded in the old registry_schema_migrations table (left in place,
-- unused); every statement here is idempotent, so goose starting its own
-- version table from scratch finds them and records version 1.

-- +goose Up
CREATE TABLE IF NOT EXISTS registry_meta (
    id       boolean PRIMARY KEY DEFAULT true CHECK (id),
    revision NUMERIC(20,0) NOT NULL DEFAULT 0 CHECK (revision BETWEEN 0 AND 18446744073709551615),
    floor    NUMERIC(20,0) NOT NULL DEFAULT 0 CHECK (floor BETWEEN 0 AND 18446744073709551615)
);
INSERT INTO registry_meta (id) VALUES (true) ON CONFLICT (id) DO NOTHING;

-- One row per resource: its fence sequence and the lease that last took it.
CREATE TABLE IF NOT EXISTS registry_resources (
    resource      text PRIMARY KEY,
    last_fence    NUMERIC(20,0) NOT NULL DEFAULT 0 CHECK (last_fence BETWEEN 0 AND 18446744073709551615),
    current_lease text
);

CREATE TABLE IF NOT EXISTS registry_leases (
    id                 text PRIMARY KEY,
    resource           text NOT NULL REFERENCES registry_resources (resource),
    owner              text NOT NULL,
    request_id         text NOT NULL,
    fence              NUMERIC(20,0) NOT NULL CHECK (fence BETWEEN 1 AND 18446744073709551615),
    revision           NUMERIC(20,0) NOT NULL CHECK (revision BETWEEN 1 AND 18446744073709551615),
    operation_id       text NOT NULL,
    operation_root     text NOT NULL,
    operation_category text NOT NULL,
    state              text NOT NULL CHECK (state IN ('HELD', 'RELEASED', 'EXPIRED')),
    ttl_ns             bigint NOT NULL CHECK (ttl_ns > 0),
    acquired_at        timestamptz NOT NULL,
    expires_at         timestamptz NOT NULL,
    UNIQUE (owner, request_id)
);

-- +goose Down
DROP TABLE IF EXISTS registry_leases;
DROP TABLE IF EXISTS registry_resources;
DROP TABLE IF EXISTS registry_meta;
