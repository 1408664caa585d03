package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

// TestClientHandsOffAndStopsAfterAPause drives the Go client against the
// binary: A writes segments, B long-polls and takes over when A releases, and
// a worker paused past its TTL stops itself without sending anything.
func TestClientHandsOffAndStopsAfterAPause(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a", "--identity", "worker-b=token-b")
	ctx := context.Background()
	ca, cb := client.New(p.base, "token-a"), client.New(p.base, "token-b")
	params := func(req string, ttl, wait time.Duration) client.LeaseParams {
		return client.LeaseParams{AcquireParams: client.AcquireParams{Resource: "local/batch/9", RequestID: req,
			TTL: ttl, OperationID: "batch-9", Wait: wait}}
	}
	a, err := ca.AcquireLease(ctx, params("a-1", 30*time.Second, 0))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		r, err := a.Objects("local").Put(ctx, "batch/9/part", strings.NewReader("A"+string(rune('0'+i))), "text/plain")
		if err != nil || r.Segment != uint64(i) || r.State != fencegate.ReceiptCommitted {
			t.Fatalf("A segment %d: %+v %v", i, r, err)
		}
	}
	got := make(chan *client.Lease, 1)
	go func() {
		b, err := cb.AcquireLease(ctx, params("b-1", 30*time.Second, 20*time.Second))
		if err != nil {
			t.Errorf("B: %v", err)
		}
		got <- b
	}()
	time.Sleep(100 * time.Millisecond) // B is waiting
	if err := a.Release(ctx); err != nil || a.State() != client.StateReleased {
		t.Fatalf("release: %v (%s)", err, a.State())
	}
	b := <-got
	if b == nil || b.Fence() <= a.Fence() {
		t.Fatal("B did not take over with a higher fence")
	}
	if r, err := b.Objects("local").Put(ctx, "batch/9/part", strings.NewReader("B1"), "text/plain"); err != nil || r.Segment != 1 {
		t.Fatalf("B write: %+v %v", r, err)
	}
	if _, err := a.Objects("local").Put(ctx, "batch/9/part", strings.NewReader("A late"), "text/plain"); err == nil {
		t.Fatal("a released lease wrote")
	}

	// A worker pauses past its TTL: the client notices before sending.
	b.Release(ctx)
	c, err := ca.AcquireLease(ctx, params("c-1", 300*time.Millisecond, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	before := p.do(t, "GET", "/v1/resources/local/batch/9", "token-a", nil, "")
	if _, err := c.Objects("local").Put(ctx, "batch/9/part", strings.NewReader("C"), "text/plain"); err == nil {
		t.Fatal("a lease past its TTL wrote")
	}
	if c.State() != client.StateOwnershipUnknown {
		t.Fatalf("state after the pause: %s", c.State())
	}
	if after := p.do(t, "GET", "/v1/resources/local/batch/9", "token-a", nil, ""); string(after.body) != string(before.body) {
		t.Fatalf("resource moved: %s -> %s", before.body, after.body)
	}
}

// TestFencectlAcquirePutReceipts runs the CLI binary against the gateway.
func TestFencectlAcquirePutReceipts(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a")
	dir := t.TempDir()
	bin := filepath.Join(filepath.Dir(binary(t)), "fencectl")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/fencectl").CombinedOutput(); err != nil {
		t.Fatalf("build fencectl: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "part"), []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctl := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "FENCEGATE_URL="+p.base, "FENCEGATE_TOKEN=token-a")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, args := range [][]string{
		{"acquire", "local/cli/1", "--ttl", "30s", "--operation", "cli-op"},
		{"put", "local/cli/1", "part"},
		{"put", "local/cli/1", "part"},
	} {
		if out, err := ctl(args...); err != nil {
			t.Fatalf("fencectl %v: %v\n%s", args, err, out)
		}
	}
	out, err := ctl("--json", "receipts", "--operation", "cli-op")
	if err != nil || strings.Count(out, `"receiptId"`) != 2 {
		t.Fatalf("receipts: %v\n%s", err, out)
	}
	out, err = ctl("put", "local/cli/1", "part", "--segment", "9")
	if err == nil || !strings.Contains(out, "SEGMENT_OUT_OF_ORDER") {
		t.Fatalf("skipped segment: %v\n%s", err, out)
	}
}

// TestClientCarriesOnAcrossKeyRotationAndRevocation: after the registry
// rotates its key and revokes the old epoch, the client's next commit is
// refused once, refreshes the lease's re-issued grant, and goes through.
func TestClientCarriesOnAcrossKeyRotationAndRevocation(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a", "--admin-token", "ops-token")
	ctx := context.Background()
	l, err := client.New(p.base, "token-a").AcquireLease(ctx, client.LeaseParams{AcquireParams: client.AcquireParams{
		Resource: "local/rot/1", RequestID: "r1", TTL: time.Minute, OperationID: "rot"}})
	if err != nil {
		t.Fatal(err)
	}
	w := l.Objects("local")
	if _, err := w.Put(ctx, "rot/1", strings.NewReader("1"), ""); err != nil {
		t.Fatal(err)
	}
	admin := client.New(p.base, "ops-token")
	if _, err := admin.RevokeEpoch(ctx, 1); err != nil { // rotates first: epoch 1 is current
		t.Fatal(err)
	}
	r, err := w.Put(ctx, "rot/1", strings.NewReader("2"), "")
	if err != nil || r.Segment != 2 || l.State() != client.StateHeld {
		t.Fatalf("after revocation: %+v %v (%s)", r, err, l.State())
	}
}
