package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/examples/queue"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsURL is the JetStream server the queue test uses (the machine's, on
// 127.0.0.1:4222, unless FENCEGATE_TEST_NATS says otherwise). Under CI=true
// an unreachable server fails the test; elsewhere it skips.
func natsURL(t *testing.T) *nats.Conn {
	t.Helper()
	url := os.Getenv("FENCEGATE_TEST_NATS")
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("NATS JetStream at %s: %v (scripts/services.sh ensure_nats starts it)", url, err)
		}
		t.Skipf("no NATS at %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestQueueCoordinatorPausedPastItsTTLIsFencedOut runs examples/queue on a
// real JetStream stream against the gateway binary: coordinator A leases a
// batch, writes its manifest (segment 1) and publishes four tasks with a
// delegation for the consumer; the consumer lands two of them; A pauses past
// its TTL, coordinator B takes the batch over with a higher fence and
// publishes its own four tasks. A learns it lost the lease (its lease
// context is cancelled) and publishes nothing more; A's two late tasks —
// segments 4 and 5, never used under A's fence — are refused, while B's
// four land: LEASE_NOT_HELD by the delegate's writer itself, sending
// nothing, once its status request finds A's lease EXPIRED (as A's own
// writers would), or STALE_OWNER by the gateway while the writer's last
// proof (stating HELD) is still fresh.
func TestQueueCoordinatorPausedPastItsTTLIsFencedOut(t *testing.T) {
	nc := natsURL(t)
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	stream, subject := "FGQ_"+id, "fencegate.queue."+id
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject},
		Storage: jetstream.MemoryStorage, MaxAge: 10 * time.Minute}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) }) // ours only
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "consumer", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}

	p := startGateway(t, "dev", "--data-dir", t.TempDir(),
		"--identity", "coord-a=token-a", "--identity", "coord-b=token-b", "--identity", "consumer=token-c")
	resource, prefix := "local/batch/"+id, "batch/"+id
	params := func(ttl, wait time.Duration) client.LeaseParams {
		return client.LeaseParams{AcquireParams: client.AcquireParams{Resource: resource, TTL: ttl, OperationID: "batch-" + id, Wait: wait}}
	}
	parts := func(who string) [][]byte {
		var out [][]byte
		for s := 2; s <= 5; s++ {
			out = append(out, fmt.Appendf(nil, "%s-%d", who, s))
		}
		return out
	}
	consumer := &queue.Consumer{Client: client.New(p.base, "token-c"), Retry: 100 * time.Millisecond}

	// Coordinator A: manifest, delegation, four tasks; two of them land.
	a, err := client.New(p.base, "token-a").AcquireLease(ctx, params(3*time.Second, 0))
	if err != nil {
		t.Fatal(err)
	}
	actx, stopA := a.Context(ctx)
	defer stopA()
	coordA := &queue.Coordinator{Lease: a, JS: js, Subject: subject, Store: "local", Consumer: "consumer"}
	if _, err := coordA.Run(actx, prefix, parts("A")); err != nil {
		t.Fatalf("coordinator A: %v", err)
	}
	for _, r := range mustProcess(t, consumer, cons, 2) {
		if r.Err != nil || r.Verdict != "ack" || r.Receipt.FenceToken != a.Fence() {
			t.Fatalf("A's task %d: %+v", r.Task.Segment, r)
		}
	}

	// A pauses (no renewal); B long-polls and takes over once A's lease lapses.
	b2, err := client.New(p.base, "token-b").AcquireLease(ctx, params(30*time.Second, 20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if b2.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d is not above A's %d", b2.Fence(), a.Fence())
	}
	coordB := &queue.Coordinator{Lease: b2, JS: js, Subject: subject, Store: "local", Consumer: "consumer"}
	if _, err := coordB.Run(ctx, prefix, parts("B")); err != nil {
		t.Fatalf("coordinator B: %v", err)
	}

	// A wakes up: its state machine notices the pause, its context ends,
	// and it publishes nothing more.
	_ = a.Tick(ctx)
	select {
	case <-actx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("A's lease context was not cancelled after the pause")
	}
	info, _ := js.Stream(ctx, stream)
	si, _ := info.Info(ctx)
	if _, err := coordA.Run(actx, prefix, parts("A")); err == nil {
		t.Fatal("A ran on after losing its lease")
	}
	if si2, _ := info.Info(ctx); si2.State.Msgs != si.State.Msgs || si.State.Msgs != 8 {
		t.Fatalf("messages on the stream: %d then %d, want 8", si.State.Msgs, si2.State.Msgs)
	}

	// The consumer drains the queue: A's late tasks first, then B's.
	var got []queue.Result
	for len(got) < 6 {
		got = append(got, mustProcess(t, consumer, cons, 6-len(got))...)
	}
	for i, r := range got {
		wantA := i < 2
		switch {
		case wantA && (!lateRefusal(r.Err) || r.Verdict != "term" || string(r.Task.Body) != fmt.Sprintf("A-%d", 4+i)):
			t.Fatalf("A's late task %d: %+v", r.Task.Segment, r)
		case !wantA && (r.Err != nil || r.Verdict != "ack" || r.Receipt.FenceToken != b2.Fence()):
			t.Fatalf("B's task %d: %+v", r.Task.Segment, r)
		}
	}

	// What the resource holds: B's fence and segments, B's parts, and no
	// receipt of A's beyond segment 3.
	st := p.do(t, "GET", "/v1/resources/"+resource, "token-b", nil, "")
	if st.num("highestFence") != b2.Fence() || st.num("lastSegmentSeq") != 5 {
		t.Fatalf("resource state %s", st.body)
	}
	for s := 2; s <= 5; s++ {
		rc, oi, err := consumer.Client.GetObject(ctx, "local", fmt.Sprintf("%s/part-%d", prefix, s))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(rc)
		rc.Close()
		if string(body) != fmt.Sprintf("B-%d", s) || oi.FenceToken != b2.Fence() {
			t.Fatalf("part %d: %q fence %d", s, body, oi.FenceToken)
		}
	}
	recs, err := client.New(p.base, "token-a").Receipts(ctx, "batch-"+id)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.FenceToken == a.Fence() && r.Segment > 3 {
			t.Fatalf("a receipt of A's late task: %+v", r)
		}
	}
}

func mustProcess(t *testing.T, c *queue.Consumer, cons jetstream.Consumer, n int) []queue.Result {
	t.Helper()
	out, err := c.Process(context.Background(), cons, n, 5*time.Second)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if len(out) == 0 {
		t.Fatal("no task fetched")
	}
	return out
}

// lateRefusal reports whether err refuses a task of a coordinator whose
// lease lapsed and was taken over: LEASE_NOT_HELD (the delegate's writer
// learned it from the registry and sent nothing) or STALE_OWNER (the
// gateway refused it for the newer fence).
func lateRefusal(err error) bool {
	code := fencegate.ErrorCode(err)
	return code == fencegate.CodeLeaseNotHeld || code == fencegate.CodeStaleOwner
}
