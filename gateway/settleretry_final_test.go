package gateway_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// settleDownStore fails every Settle without a verdict while down.
type settleDownStore struct {
	fencegate.FenceStore
	down atomic.Bool
}

func (s *settleDownStore) Settle(ctx context.Context, id string, o fencegate.Outcome) (fencegate.Receipt, error) {
	if s.down.Load() {
		return fencegate.Receipt{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "fence store down")
	}
	return s.FenceStore.Settle(ctx, id, o)
}

// TestQueuedProofOfCommittedIsNotReplacedByUnknown: a reader proves a
// PENDING receipt COMMITTED from its object while the fence store cannot
// take the settle: it is answered COMMITTED and the proof waits for retry.
// The write's own effect then ends UNKNOWN (its answer and its HEAD lost)
// and its settle fails too. When the store is back it records COMMITTED,
// what the reader was told, not the later UNKNOWN.
func TestQueuedProofOfCommittedIsNotReplacedByUnknown(t *testing.T) {
	f := newFixture(t)
	st := &settleDownStore{FenceStore: f.store}
	tick := make(chan time.Time) // the retry loop's and Drain's waits: none end until the store is back
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now,
		After:  func(time.Duration) <-chan time.Time { return tick },
		Policy: gateway.StaticPolicy{Generation: 1}, NewID: func() string { return "rcpt_x" },
		Resolver: func(string) gateway.Resolver { return f.objects() }})
	if err != nil {
		t.Fatal(err)
	}
	landed, release := make(chan struct{}), make(chan struct{})
	var headFails atomic.Bool
	f.obj.set(func(ctx context.Context, req fencegate.PutRequest) (string, error) {
		if _, err := f.obj.ObjectStore.Put(ctx, req); err != nil {
			return "", err
		}
		close(landed)
		<-release
		return "", fencegate.Errorf(fencegate.CodeBackendUnavailable, "timeout: answer lost")
	}, func(ctx context.Context, key string) (fencegate.ObjectInfo, error) {
		if headFails.Load() {
			return fencegate.ObjectInfo{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "timeout")
		}
		return f.obj.ObjectStore.Head(ctx, key)
	})
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := gw.Apply(ctx, f.request(5, 1, "v1"))
		done <- err
	}()
	<-landed
	st.down.Store(true)
	read, err := gw.Store().Receipt(ctx, "rcpt_x")
	if err != nil || read.State != fencegate.ReceiptCommitted {
		t.Fatalf("reader: %+v %v", read, err)
	}
	headFails.Store(true)
	close(release)
	<-done
	st.down.Store(false)
	close(tick) // from now on every wait ends at once
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = gw.Drain(dctx)
	stored, _ := f.store.Receipt(ctx, "rcpt_x")
	if stored.State != fencegate.ReceiptCommitted {
		t.Fatalf("reader was told COMMITTED, store recorded %s (the queued proof was replaced)", stored.State)
	}
}
