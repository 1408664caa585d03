package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/embedded"
)

// TestEmbeddedPrefillWritesSettledReceiptsInSegmentOrder: -prefill N on the
// embedded path leaves N COMMITTED receipts over N/10 resources, each
// resource settled at segment 10 of fence 1 with no effect in flight, and
// the copy a point's gateway opens holds the same.
func TestEmbeddedPrefillWritesSettledReceiptsInSegmentOrder(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "filled.db")
	if err := prefillEmbedded(context.Background(), path, 200); err != nil {
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
	ctx := context.Background()
	for r := 1; r <= 20; r++ {
		name := fencegate.ObjectResource("local", fmt.Sprintf("fill/%d", r))
		st, err := s.Resource(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if st.HighestFence != 1 || st.LastSegmentSeq != 10 || st.PendingReceipt != "" {
			t.Fatalf("%s: %+v, want fence 1 at segment 10 with nothing pending", name, st)
		}
	}
	n := 0
	for page := (fencegate.Page{Limit: 100}); ; {
		p, err := s.ReceiptsByState(ctx, fencegate.ReceiptCommitted, page)
		if err != nil {
			t.Fatal(err)
		}
		n += len(p.Receipts)
		if p.Next == "" {
			break
		}
		page.Cursor = p.Next
	}
	if n != 200 {
		t.Fatalf("%d COMMITTED receipts, want 200", n)
	}
}
