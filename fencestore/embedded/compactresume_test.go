package embedded

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// Rule: a sweep of CompactReceipts calls (each stopping at its limit)
// examines each receipt the rules keep once, not once per call: receipts
// that can never go (each resource's last segment) ahead of the compactable
// ones in the index do not make the sweep quadratic; every compactable
// receipt still goes, and a later sweep starts from the beginning again.
func TestACompactionSweepExaminesEachKeptReceiptOnce(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	w := newSettledWrites(t, s)
	write := w.write
	const kept, gone, limit = 60, 120, 10
	for i := range kept { // each its resource's last segment: never compactable
		write(fmt.Sprintf("res/k%d", i), 1, fmt.Sprintf("k%d", i))
	}
	for i := range gone + 1 { // all but the last compactable
		write("res/many", uint64(i+1), fmt.Sprintf("g%d", i))
	}
	cutoff := w.at.Add(time.Hour)
	total, calls := 0, 0
	for {
		n, err := s.CompactReceipts(ctx, cutoff, limit)
		if err != nil {
			t.Fatal(err)
		}
		total, calls = total+n, calls+1
		if n < limit {
			break
		}
	}
	if total != gone {
		t.Fatalf("the sweep compacted %d receipts, want %d", total, gone)
	}
	if scanned := s.compactScanned.Load(); scanned > 2*(kept+gone) {
		t.Fatalf("the sweep of %d calls examined %d index entries for %d receipts: kept ones were examined again by each call", calls, scanned, kept+gone+1)
	}
	// A receipt kept by a sweep goes in the next one once the rules allow:
	// res/k0's segment 1 is no longer its last.
	write("res/k0", 2, "k0-2")
	if n, err := s.CompactReceipts(ctx, w.at.Add(time.Hour), limit); err != nil || n != 1 {
		t.Fatalf("the next sweep compacted %d, %v; want res/k0's first segment", n, err)
	}
	if _, err := s.Receipt(ctx, "k0"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("res/k0's first receipt after the next sweep: %v, want NOT_FOUND", err)
	}
}
