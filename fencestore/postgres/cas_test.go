package postgres

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata/cas_shapes.golden from the current casText")

// casShapes builds every shape the fast path builds, each field a value of
// its own, so that the text with its arguments filled in shows which value
// goes to which column.
func casShapes() map[string]*casStmt {
	at := func(ms int64) *time.Time { t := time.UnixMilli(1_700_000_000_000 + ms).UTC(); return &t }
	row := fencegate.ResourceState{Resource: "cas/r", HighestFence: 7, Root: "root-was", Lease: "lease-was",
		LastSegmentSeq: 2, GrantIssuedAt: 1_700_000_000_001, PendingReceipt: "r-was", UpdatedAt: *at(2)}
	next := fencegate.ResourceState{Resource: "cas/r", HighestFence: 8, Root: "root-next", Lease: "lease-next",
		LastSegmentSeq: 3, GrantIssuedAt: 1_700_000_000_003, PendingReceipt: "r-next", UpdatedAt: *at(4)}
	was := fencegate.Receipt{ID: "r-was", Resource: "cas/r", Target: "target-was", Method: "PUT", FenceToken: 7, Segment: 2,
		OperationID: "op", OperationRoot: "op-root", Lease: "lease-was", Owner: "owner", GrantDigest: "gd", PayloadDigest: "pd",
		State: fencegate.ReceiptPending, Version: "v-was", Error: "e-was", CreatedAt: *at(5), SettledAt: at(6),
		Attempts: 1, RetryAt: at(7), EffectKey: "ek", LandBy: *at(8), Delegate: "delegate", DelegationID: "dlg"}
	committed, gone, failed := was, was, was
	committed.State, committed.Version, committed.SettledAt, committed.Attempts = fencegate.ReceiptCommitted, "v-next", at(9), 2
	committed.Error, committed.Resend, committed.RetryAt, committed.Target = "e-next", true, at(10), "target-next"
	gone.State, gone.Version, gone.SettledAt, gone.Target = fencegate.ReceiptCommitted, "", at(11), "target-gone"
	failed.State, failed.SettledAt = fencegate.ReceiptFailed, at(12)
	fresh := was
	fresh.ID, fresh.State, fresh.Version, fresh.Error, fresh.SettledAt, fresh.RetryAt = "r-new", fencegate.ReceiptPending, "", "", nil, nil
	build := func(f func(c *casStmt)) *casStmt { c := newCASStmt(); f(c); c.sql("cas/r"); return c }
	return map[string]*casStmt{
		"new row, receipt":              build(func(c *casStmt) { c.row(nil, &next); c.insert(&fresh) }),
		"row, receipt":                  build(func(c *casStmt) { c.row(&row, &next); c.insert(&fresh) }),
		"row, prior with version":       build(func(c *casStmt) { c.row(&row, &next); c.settled(&was, &committed); c.insert(&fresh) }),
		"row, prior forgetting version": build(func(c *casStmt) { c.row(&row, &next); c.settled(&was, &gone); c.insert(&fresh) }),
		"settle with version":           build(func(c *casStmt) { c.row(&row, &next); c.settled(&was, &committed) }),
		"settle forgetting version":     build(func(c *casStmt) { c.row(&row, &next); c.settled(&was, &gone) }),
		"settle failed":                 build(func(c *casStmt) { c.row(&row, &next); c.settled(&was, &failed) }),
	}
}

// TestCASStatementsPutEachValueInItsColumn: every shape's text with its
// arguments filled in is the one in testdata/cas_shapes.golden, which the
// statements as built before the text was cached (87ec700: each
// placeholder numbered as its argument was appended) also produce, checked
// when it was written: a placeholder swapped between two columns, or an
// argument appended in another order, changes it. Rewrite it with -update only
// after reading the difference.
func TestCASStatementsPutEachValueInItsColumn(t *testing.T) {
	shapes := casShapes()
	names := make([]string, 0, len(shapes))
	for name := range shapes {
		names = append(names, name)
	}
	slices.Sort(names)
	ph := regexp.MustCompile(`\$([0-9]+)`)
	var out strings.Builder
	for _, name := range names {
		c := shapes[name]
		filled := ph.ReplaceAllStringFunc(casText(c.shape), func(m string) string {
			i, _ := strconv.Atoi(m[1:])
			return literal(c.args[i-1])
		})
		out.WriteString("-- " + name + "\n" + filled + "\n\n")
	}
	golden := filepath.Join("testdata", "cas_shapes.golden")
	if *updateGolden {
		if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Fatalf("the fast path's statements differ from %s:\n%s", golden, out.String())
	}
}

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
