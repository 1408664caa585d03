package e2e

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

// losesAnswers is an HTTP transport that, while lose is set, sends an
// object write to the gateway and then drops its answer (the write took
// effect; the client never hears of it).
type losesAnswers struct{ lose atomic.Bool }

func (t *losesAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil && r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/objects/") && t.lose.CompareAndSwap(true, false) {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return nil, errors.New("connection reset (the answer was dropped)")
	}
	return resp, err
}

// TestClientRecoversLostAnswersFromTheBinarysReceipts: through the built
// gateway, a write whose answer was lost is recovered from the gateway's
// receipts, never written twice: retried at once, it is answered with its
// receipt; found COMMITTED by another write first, its later retry gets
// the same receipt. (The client matches a receipt to its effect by the
// method, target and payload digest the gateway records.)
func TestClientRecoversLostAnswersFromTheBinarysReceipts(t *testing.T) {
	p := startGateway(t, "dev", "--data-dir", t.TempDir(), "--identity", "worker-a=token-a")
	ctx := context.Background()
	lossy := &losesAnswers{}
	c := client.New(p.base, "token-a", client.WithHTTPClient(&http.Client{Transport: lossy, Timeout: 30 * time.Second}))
	l, err := c.AcquireLease(ctx, client.LeaseParams{AcquireParams: client.AcquireParams{Resource: "local/lost",
		TTL: 30 * time.Second, OperationID: "lost-1"}})
	if err != nil {
		t.Fatal(err)
	}
	objs := l.Objects("local")
	put := func(key, body string) (fencegate.Receipt, error) {
		return objs.Put(ctx, key, strings.NewReader(body), "text/plain")
	}

	lossy.lose.Store(true)
	if _, err := put("lost/a", "A1"); !client.IsUncertain(err) {
		t.Fatalf("the write whose answer was dropped: %v, want an uncertain error", err)
	}
	ra, err := put("lost/a", "A1")
	if err != nil || ra.Segment != 1 || ra.State != fencegate.ReceiptCommitted {
		t.Fatalf("its retry: %+v %v, want segment 1's receipt", ra, err)
	}

	lossy.lose.Store(true)
	if _, err := put("lost/b", "B1"); !client.IsUncertain(err) {
		t.Fatalf("the second dropped answer: %v", err)
	}
	rc, err := put("lost/c", "C1") // finds lost/b's write COMMITTED first
	if err != nil || rc.Segment != 3 {
		t.Fatalf("the next write: %+v %v, want segment 3", rc, err)
	}
	rb, err := put("lost/b", "B1")
	if err != nil || rb.Segment != 2 || rb.State != fencegate.ReceiptCommitted {
		t.Fatalf("the retry of the write another write found committed: %+v %v, want segment 2's receipt", rb, err)
	}
	list, err := c.Receipts(ctx, "lost-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("%d receipts for three writes, each sent once: %+v", len(list), list)
	}
}
