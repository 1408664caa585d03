package e2e

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/registry/redis/redistest"
)

// TestRestoredRedisSnapshotIsFenceRegressionUntilTheFloorIsRaised restores an
// old snapshot of the registry's Redis state, so the registry hands out a fence
// the resource has already seen. The gateway answers FENCE_REGRESSION, counts
// it, never lowers highestFence, and writes resume once the floor is raised.
func TestRestoredRedisSnapshotIsFenceRegressionUntilTheFloorIsRaised(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := testenv.RandomName("{fg-e2e-") + "}:"
	ctx := context.Background()
	rdb := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() {
		if keys, err := rdb.Keys(ctx, prefix+"*").Result(); err == nil && len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		_ = rdb.Close()
	})
	maddr := freePort(t)
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a", "--identity", "worker-b=token-b",
		"--admin-token", "ops-token", "--registry-backend", "redis://"+addr+"?prefix="+prefix, "--metrics-addr", maddr)

	a := p.acquire(t, "token-a", "local/ledger", "a-1", "close-books", 60000)
	if r := p.put(t, "token-a", a, "local/ledger", 1, "A"); r.status != 200 {
		t.Fatalf("A: %d %s", r.status, r.body)
	}
	p.do(t, "DELETE", "/v1/leases/"+a.id, "token-a", nil, "")
	snap, err := redistest.Snapshot(ctx, rdb, prefix)
	if err != nil || snap.Len() == 0 {
		t.Fatalf("snapshot: %v (%d keys)", err, snap.Len())
	}
	b := p.acquire(t, "token-b", "local/ledger", "b-1", "close-books", 60000)
	if r := p.put(t, "token-b", b, "local/ledger", 1, "B"); r.status != 200 {
		t.Fatalf("B: %d %s", r.status, r.body)
	}
	p.do(t, "DELETE", "/v1/leases/"+b.id, "token-b", nil, "")

	if err := snap.Restore(ctx, rdb); err != nil { // the coordination backend goes back in time
		t.Fatal(err)
	}
	c := p.acquire(t, "token-a", "local/ledger", "c-1", "close-books", 60000)
	if c.fence > b.fence {
		t.Fatalf("restored registry handed out fence %d, above %d: no regression to test", c.fence, b.fence)
	}
	wantCode(t, p.put(t, "token-a", c, "local/ledger", 1, "C"), http.StatusConflict, "FENCE_REGRESSION")
	res := p.do(t, "GET", "/v1/resources/local/ledger", "token-a", nil, "")
	if res.num("highestFence") != b.fence {
		t.Fatalf("highestFence moved: %s", res.body)
	}
	if obj := p.do(t, "GET", "/v1/objects/local/ledger", "token-a", nil, ""); string(obj.body) != "B" {
		t.Fatalf("object = %q", obj.body)
	}
	metrics := (&gatewayProc{base: "http://" + maddr}).do(t, "GET", "/metrics", "", nil, "")
	m := regexp.MustCompile(`fencegate_fence_regressions_total\{resource="local/ledger"\} (\d+)`).FindSubmatch(metrics.body)
	if m == nil {
		t.Fatalf("no regression alarm in metrics:\n%s", metrics.body)
	}
	if n, _ := strconv.Atoi(string(m[1])); n < 1 {
		t.Fatalf("regression counter = %d", n)
	}

	// The operator raises the floor above every fence the gateways hold.
	p.do(t, "DELETE", "/v1/leases/"+c.id, "token-a", nil, "")
	if f := p.do(t, "POST", "/v1/admin/floor", "ops-token", nil, `{"floor":1000}`); f.status != 200 {
		t.Fatalf("floor: %d %s", f.status, f.body)
	}
	d := p.acquire(t, "token-a", "local/ledger", "d-1", "close-books", 60000)
	if d.fence <= 1000 {
		t.Fatalf("fence after floor = %d", d.fence)
	}
	if r := p.put(t, "token-a", d, "local/ledger", 1, "D"); r.status != 200 {
		t.Fatalf("write after floor: %d %s", r.status, r.body)
	}
}
