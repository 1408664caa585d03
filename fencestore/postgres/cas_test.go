package postgres

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

// TestCASTextNumbersEveryArgument: the statement text built once per shape
// (casText) has exactly one placeholder per argument the writes' methods
// appended, numbered from $1 without a gap, for every shape the fast path
// builds; and receiptArgCount is the number of receiptCols.
func TestCASTextNumbersEveryArgument(t *testing.T) {
	if n := len(strings.Split(receiptCols, ",")); n != receiptArgCount {
		t.Fatalf("receiptCols has %d columns, receiptArgCount is %d", n, receiptArgCount)
	}
	now := time.UnixMilli(1_700_000_000_000).UTC()
	row := fencegate.ResourceState{Resource: "cas/r", HighestFence: 7, LastSegmentSeq: 2, PendingReceipt: "r1", UpdatedAt: now}
	next := row
	next.PendingReceipt, next.LastSegmentSeq = "", 3
	was := fencegate.Receipt{ID: "r1", Resource: "cas/r", Target: "cas/r", FenceToken: 7, Segment: 2,
		State: fencegate.ReceiptPending, CreatedAt: now}
	committed, gone, failed := was, was, was
	committed.State, committed.Version, committed.SettledAt = fencegate.ReceiptCommitted, "v1", &now
	gone.State, gone.SettledAt = fencegate.ReceiptCommitted, &now
	failed.State, failed.SettledAt = fencegate.ReceiptFailed, &now
	shapes := map[string]func(c *casStmt){
		"new row, receipt":              func(c *casStmt) { c.row(nil, &next); c.insert(&was) },
		"row, receipt":                  func(c *casStmt) { c.row(&row, &next); c.insert(&was) },
		"row, prior with version":       func(c *casStmt) { c.row(&row, &next); c.settled(&was, &committed); c.insert(&was) },
		"row, prior forgetting version": func(c *casStmt) { c.row(&row, &next); c.settled(&was, &gone); c.insert(&was) },
		"settle with version":           func(c *casStmt) { c.row(&row, &next); c.settled(&was, &committed) },
		"settle failed":                 func(c *casStmt) { c.row(&row, &next); c.settled(&was, &failed) },
	}
	ph := regexp.MustCompile(`\$([0-9]+)`)
	for name, build := range shapes {
		t.Run(name, func(t *testing.T) {
			c := &casStmt{}
			build(c)
			q := c.sql("cas/r")
			seen := map[int]bool{}
			for _, m := range ph.FindAllStringSubmatch(q, -1) {
				i, _ := strconv.Atoi(m[1])
				seen[i] = true
			}
			for i := 1; i <= len(c.args); i++ {
				if !seen[i] {
					t.Fatalf("%d arguments, $%d not in the text:\n%s", len(c.args), i, q)
				}
			}
			if len(seen) != len(c.args) {
				t.Fatalf("%d placeholders for %d arguments:\n%s", len(seen), len(c.args), q)
			}
			if again := (&casStmt{shape: c.shape}).sql("x"); again != q {
				t.Fatalf("the shape's text changed between builds")
			}
		})
	}
}
