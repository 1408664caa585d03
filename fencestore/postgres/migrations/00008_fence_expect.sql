-- fence_expect(ok, what) raises SQLSTATE FGM01 unless ok. An optimistic
-- (compare-and-set) statement of the store calls it on what it found, so
-- that a pipeline sent with its COMMIT in one round trip rolls back when the
-- state it was decided on has changed; the store then runs the batch again
-- under its row locks.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION fence_expect(ok boolean, what text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION 'fence store: stale optimistic state: %', what USING ERRCODE = 'FGM01';
    END IF;
    RETURN true;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION fence_expect(boolean, text);
