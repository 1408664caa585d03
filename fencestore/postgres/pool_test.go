package postgres

import (
	"context"
	"net/url"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestPoolMaxConnsSetsTheWriteBatchesAtOnce: without pool_max_conns in the
// URL the store runs up to defaultSlots write batches at once on a pool of
// that many connections plus two for reads; with it, the URL's budget is the
// pool and all but two of it the batches, the tuning README (Throughput,
// seventh session) measures. A budget under 3 is refused (INVALID_REQUEST):
// it would leave reads queueing behind the write batch.
func TestPoolMaxConnsSetsTheWriteBatchesAtOnce(t *testing.T) {
	base := testenv.PostgresURL(t)
	for _, c := range []struct {
		param           string
		slots, maxConns int
	}{
		{"", defaultSlots, defaultSlots + 2},
		{"3", 1, 3},
		{"6", 4, 6},
		{"2", 0, 0},
		{"1", 0, 0},
	} {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		if c.param != "" {
			q := u.Query()
			q.Set("pool_max_conns", c.param)
			u.RawQuery = q.Encode()
		}
		s, err := open(context.Background(), u.String(), nil)
		if c.slots == 0 {
			if code := fencegate.ErrorCode(err); code != fencegate.CodeInvalidRequest {
				t.Errorf("pool_max_conns=%q: Open answered %v (%s), want INVALID_REQUEST", c.param, err, code)
			}
			if s != nil {
				_ = s.Close()
			}
			continue
		}
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
