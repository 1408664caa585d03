package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/testenv"
)

// TestACompactionSweepResumesWhereItsLastCallStopped — rule: a sweep of
// CompactReceipts calls (each stopping at its limit) examines each receipt
// the rules keep once, not once per call: a call resumes its walk after the
// last receipt the call before it deleted, so the kept receipts ahead of
// the compactable ones (the oldest: each resource's last segment) are not
// walked again by every call. A receipt that becomes compactable after the
// sweep walked past it is therefore left to the next sweep, which starts
// from the beginning again and deletes it.
func TestACompactionSweepResumesWhereItsLastCallStopped(t *testing.T) {
	ctx := context.Background()
	s, err := open(ctx, testenv.PostgresURL(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	at := time.UnixMilli(1_700_000_000_000).UTC()
	write := func(res string, seg uint64, id string) {
		t.Helper()
		at = at.Add(time.Millisecond)
		if _, err := s.Admit(ctx, writeReq(res, seg, id, at)); err != nil {
			t.Fatal(err)
		}
		at = at.Add(time.Millisecond)
		if _, err := s.Settle(ctx, id, committed("v-"+id, at)); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(id string) bool {
		t.Helper()
		_, err := s.Receipt(ctx, id)
		if err != nil && fencegate.ErrorCode(err) != fencegate.CodeNotFound {
			t.Fatal(err)
		}
		return err == nil
	}
	compact := func(cutoff time.Time, want int, why string) {
		t.Helper()
		if n, err := s.CompactReceipts(ctx, cutoff, 2); err != nil || n != want {
			t.Fatalf("CompactReceipts = %d, %v; want %d (%s)", n, err, want, why)
		}
	}

	for i := range 3 { // the oldest, each its resource's last segment: kept
		write(fmt.Sprintf("res/k%d", i), 1, fmt.Sprintf("k%d", i))
	}
	for i := range 5 { // g0..g3 compactable, g4 the last segment
		write("res/many", uint64(i+1), fmt.Sprintf("g%d", i))
	}
	cutoff := at.Add(time.Hour)
	compact(cutoff, 2, "g0, g1")
	// k0 is no longer its resource's last segment, but the sweep is past it.
	write("res/k0", 2, "k0-2")
	compact(cutoff, 2, "g2, g3: the walk goes on after g1")
	if !exists("k0") {
		t.Fatal("the second call of the sweep walked the receipts before where the first stopped again (it deleted k0)")
	}
	compact(cutoff, 0, "the walk reaches the cutoff")
	for i := range 4 {
		if id := fmt.Sprintf("g%d", i); exists(id) {
			t.Fatalf("%s was not compacted by the sweep", id)
		}
	}
	compact(cutoff, 1, "the next sweep starts from the beginning: k0")
	if exists("k0") || !exists("k0-2") || !exists("k1") || !exists("g4") {
		t.Fatal("the next sweep did not delete k0 alone")
	}
}
