package local_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/gateway"
)

// failingDirSync makes every directory fsync of s fail until healed.
func failingDirSync(s *local.Store) (heal func()) {
	var mu sync.Mutex
	failing := true
	local.SetDirSync(s, func(string) error {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return errors.New("EIO: injected directory fsync failure")
		}
		return nil
	})
	return func() { mu.Lock(); failing = false; mu.Unlock() }
}

// TestPutWhoseDirectoryFsyncFailedIsNotCommittedByHeadAlone: the rename is
// visible but may not survive a crash when the directory fsync after it
// fails. The put is UNKNOWN (not COMMITTED because Head sees the object):
// Head answers only once a fresh directory fsync succeeds, and then the
// object it shows is durable.
func TestPutWhoseDirectoryFsyncFailedIsNotCommittedByHeadAlone(t *testing.T) {
	s := open(t)
	heal := failingDirSync(s)
	r := fencegate.Receipt{ID: "rcpt_dur", Resource: "objects/loc/k", Target: "objects/loc/k", FenceToken: 1, Segment: 1,
		OperationRoot: "root", OperationID: "op", PayloadDigest: "d", State: fencegate.ReceiptPending, CreatedAt: time.Now()}
	put := gateway.ObjectPut{Store: s, Key: "k", Body: strings.NewReader("v1"), Size: 2}
	o, err := put.Apply(context.Background(), r, "")
	if o.State != fencegate.ReceiptUnknown || err == nil {
		t.Fatalf("put whose directory fsync failed: %s %v; want UNKNOWN", o.State, err)
	}
	if _, err := s.Head(context.Background(), "k"); err == nil {
		t.Fatal("Head showed an object whose directory entry is not durable")
	}
	if _, _, err := s.List(context.Background(), "", "", 10); err == nil {
		t.Fatal("List answered while the directory is not durable")
	}
	heal()
	info, err := s.Head(context.Background(), "k")
	if err != nil {
		t.Fatalf("Head after the directory fsync succeeded: %v", err)
	}
	if m, ok := fencegate.ParseEffectMeta(info.Metadata); !ok || m.ReceiptID != r.ID {
		t.Fatalf("object after healing: %+v; want the receipt's own", info.Metadata)
	}
	// Reconciling now (the object durable) proves COMMITTED.
	res := gateway.ObjectResolver{Stores: map[string]fencegate.ObjectStore{"loc": s}}
	if o, err := res.Resolve(context.Background(), r); err != nil || o.State != fencegate.ReceiptCommitted {
		t.Fatalf("reconcile after healing: %s %v; want COMMITTED", o.State, err)
	}
}
