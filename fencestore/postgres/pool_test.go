package postgres

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// withPool is dsn with pool_max_conns set to n ("" leaves it out).
func withPool(t *testing.T, dsn, n string) string {
	t.Helper()
	if n == "" {
		return dsn
	}
	return testenv.WithParam(t, dsn, "pool_max_conns", n)
}

// TestPoolMaxConnsSetsTheWriteBatchesAtOnce: without pool_max_conns in the
// URL the store runs up to defaultSlots write batches at once on a pool of
// that many connections plus two for reads; with it, the URL's budget is the
// pool and all but two of it the batches, the tuning README (Throughput, Tuning)
// and docs/throughput.md (seventh session) measure.
func TestPoolMaxConnsSetsTheWriteBatchesAtOnce(t *testing.T) {
	base := testenv.PostgresURL(t)
	for _, c := range []struct {
		param           string
		slots, maxConns int
	}{
		{"", defaultSlots, defaultSlots + 2},
		{"3", 1, 3},
		{"6", 4, 6},
	} {
		s, err := open(context.Background(), withPool(t, base, c.param), nil)
		if err != nil {
			t.Fatalf("pool_max_conns=%q: %v", c.param, err)
		}
		if s.writes.slots != c.slots || int(s.pool.Config().MaxConns) != c.maxConns {
			t.Errorf("pool_max_conns=%q: %d batches at once on %d connections, want %d on %d",
				c.param, s.writes.slots, s.pool.Config().MaxConns, c.slots, c.maxConns)
		}
		_ = s.Close()
	}
}

// TestPoolMaxConnsUnderThreeIsRefusedWithoutMigrating: a budget under 3
// would leave reads queueing behind the write batch, so Open refuses it
// (INVALID_REQUEST) before it touches the database: the schema stays empty.
func TestPoolMaxConnsUnderThreeIsRefusedWithoutMigrating(t *testing.T) {
	dsn := testenv.PostgresURL(t)
	for _, n := range []string{"1", "2"} {
		s, err := open(context.Background(), withPool(t, dsn, n), nil)
		if code := fencegate.ErrorCode(err); code != fencegate.CodeInvalidRequest {
			t.Errorf("pool_max_conns=%s: Open answered %v (%s), want INVALID_REQUEST", n, err, code)
		}
		if s != nil {
			_ = s.Close()
		}
	}
	if tables := testenv.SchemaTables(t, dsn); tables != 0 {
		t.Errorf("a refused Open left %d tables in its schema", tables)
	}
}
