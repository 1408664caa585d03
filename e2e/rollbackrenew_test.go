package e2e

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate/internal/testenv"
	"github.com/fencegate/fencegate/registry/redis/redistest"
)

// TestRollbackHiddenByARenewalIsFoundBeforeAFenceIsIssuedTwice is the guard
// of every mutation (fencegate.Guard) against the built binary: the
// registry's Redis keys are restored from a DUMP taken before C's
// acquisition, behind the running gateway (its watch tick an hour away), so
// that C's fence on local/c is lost while every other resource keeps its
// fences (the global highest fence does not show the loss). A's renewal is
// the first mutation on the restored keys: it is refused
// (COORDINATION_STATE_LOST), where before it moved the restored revision back
// to the one the registry saw and D was then issued C's fence a second time.
// Once grants resume, D's fence on local/c is above C's.
func TestRollbackHiddenByARenewalIsFoundBeforeAFenceIsIssuedTwice(t *testing.T) {
	addr := testenv.RedisAddr(t)
	prefix := testenv.RandomName("{fg-e2e-") + "}:"
	shared := goredis.NewClient(&goredis.Options{Addr: addr})
	t.Cleanup(func() {
		ctx := context.Background()
		if keys, err := shared.Keys(ctx, prefix+"*").Result(); err == nil && len(keys) > 0 {
			shared.Del(ctx, keys...)
		}
		_ = shared.Close()
	})
	dir := t.TempDir()
	conf := lossConfig(t, dir, "dev-1", "reconcile:\n  interval: 1h\n")
	p := startGateway(t, "dev", "--config", conf, "--data-dir", filepath.Join(dir, "data"),
		"--identity", "worker-a=token-a", "--identity", "worker-c=token-c", "--identity", "worker-d=token-d",
		"--admin-token", "ops-token", "--registry-backend", "redis://"+addr+"?prefix="+prefix, "--allow-volatile-backend")

	a := p.acquire(t, "token-a", "local/a", "a-1", "op-a", 60000)
	dump, err := redistest.Snapshot(context.Background(), shared, prefix)
	if err != nil || dump.Len() == 0 {
		t.Fatalf("snapshot: %v (%d keys)", err, dump.Len())
	}
	c := p.acquire(t, "token-c", "local/c", "c-1", "op-c", 60000) // lost with the restore, never written
	if c.fence != a.fence {
		t.Fatalf("C's fence %d, want %d (the global highest must not show the loss)", c.fence, a.fence)
	}
	if err := dump.Restore(context.Background(), shared); err != nil {
		t.Fatal(err)
	}

	renew := p.do(t, "POST", "/v1/leases/"+a.id+"/renew", "token-a", map[string]string{"Content-Type": "application/json"}, `{"ttlMs":60000}`)
	wantCode(t, renew, http.StatusServiceUnavailable, "COORDINATION_STATE_LOST")
	adm := p.do(t, "GET", "/v1/admin/state", "ops-token", nil, "")
	if is, _ := adm.json["issuance"].(map[string]any); is["paused"] != true {
		t.Fatalf("issuance after the refused renewal: %s", adm.body)
	}

	d, _ := p.acquireWhenResumed(t, "token-d", "local/c", "d-1", "op-c")
	if d.fence <= c.fence {
		t.Fatalf("D was issued fence %d on local/c, C's lost acquisition had %d: a fence issued twice", d.fence, c.fence)
	}
	if r := p.put(t, "token-d", p.freshStatus(t, "token-d", d), "local/c", 1, "D1"); r.status != 200 {
		t.Fatalf("D's write: %d %s", r.status, r.body)
	}
}
