package gateway_test

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/gateway"
)

func TestOrderedReceiptIDsSortByTimeAndDiffer(t *testing.T) {
	t0 := time.UnixMilli(1_800_000_000_000)
	a := gateway.NewOrderedID("rcpt_", t0)
	b := gateway.NewOrderedID("rcpt_", t0)
	c := gateway.NewOrderedID("rcpt_", t0.Add(time.Millisecond))
	if len(a) != len("rcpt_")+26 || len(c) != len(a) {
		t.Fatalf("length: %q %q", a, c)
	}
	if a == b {
		t.Fatalf("two IDs of one millisecond are equal: %q", a)
	}
	if !(a < c && b < c) {
		t.Fatalf("a later ID does not sort after earlier ones: %q %q then %q", a, b, c)
	}
	if a[:len("rcpt_")+12] != "rcpt_01a3185c5000" {
		t.Fatalf("time part: %q", a)
	}
}
