package main

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/embedded"
)

// TestEmbeddedPrefillWritesSettledReceiptsInSegmentOrder: -prefill N on the
// embedded path leaves N COMMITTED receipts over N/10 resources (more
// resources than writers, so writers take several), each resource settled
// at segment 10 of fence 1 with no effect in flight, receipts a day old
// whose IDs follow their creation (to the millisecond, as the gateway's),
// and the copy a point's gateway opens holds the same.
func TestEmbeddedPrefillWritesSettledReceiptsInSegmentOrder(t *testing.T) {
	const n = 5200 // 520 resources, over 512 writers
	dir := t.TempDir()
	path := filepath.Join(dir, "filled.db")
	if err := prefillEmbedded(t.Context(), path, n); err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(dir, "point", "data", "fencestore.db")
	if err := copyFile(path, cp); err != nil {
		t.Fatal(err)
	}
	s, err := embedded.Open(cp)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := t.Context()
	for r := 1; r <= n/10; r++ {
		name := fencegate.ObjectResource("local", fmt.Sprintf("fill/%d", r))
		st, err := s.Resource(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if st.HighestFence != 1 || st.LastSegmentSeq != 10 || st.PendingReceipt != "" {
			t.Fatalf("%s: %+v, want fence 1 at segment 10 with nothing pending", name, st)
		}
	}
	var all []fencegate.Receipt
	for page := (fencegate.Page{Limit: fencegate.MaxPageLimit}); ; {
		p, err := s.ReceiptsByState(ctx, fencegate.ReceiptCommitted, page)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, p.Receipts...)
		if p.Next == "" {
			break
		}
		page.Cursor = p.Next
	}
	if len(all) != n {
		t.Fatalf("%d COMMITTED receipts, want %d", len(all), n)
	}
	day := time.Now().Add(-24 * time.Hour)
	for i, r := range all { // in creation order
		if r.CreatedAt.Before(day.Add(-time.Hour)) || r.CreatedAt.After(day.Add(time.Hour)) {
			t.Fatalf("receipt %s created %s, want about a day ago", r.ID, r.CreatedAt)
		}
		if i > 0 && r.ID[:len("rcpt_")+12] < all[i-1].ID[:len("rcpt_")+12] {
			t.Fatalf("receipt %s (created %s) sorts before %s (created %s) to the millisecond", r.ID, r.CreatedAt, all[i-1].ID, all[i-1].CreatedAt)
		}
	}
}
