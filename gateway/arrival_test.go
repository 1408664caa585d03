package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// assigned is f.request without a segment, numbered by the gateway.
func (f *fixture) assigned(fence uint64, target, body string) gateway.Request {
	r := f.request(fence, 0, body)
	r.AssignSegment = true
	r.Target = target
	r.Effect = gateway.ObjectPut{Store: f.obj, Key: strings.TrimPrefix(target, "objects/local/"), Body: strings.NewReader(body), Size: int64(len(body))}
	return r
}

func TestArrivalOrderNumbersWritesAndAnswersARetryFromItsReceipt(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := fencegate.ObjectTarget("local", key)
	b := fencegate.ObjectTarget("local", key+"-b")
	var segs []uint64
	var first string
	for i, w := range []struct{ target, body string }{{a, "one"}, {b, "two"}, {a, "one"}, {a, "three"}, {a, "one"}} {
		res, err := f.gw.Apply(ctx, f.assigned(1, w.target, w.body))
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		segs = append(segs, res.Receipt.Segment)
		if i == 0 {
			first = res.Receipt.ID
		}
		if i == 2 && (!res.Replay || res.Receipt.ID != first) {
			t.Fatalf("the same bytes again answered %+v, want a replay of %s", res, first)
		}
		if i == 4 && res.Replay {
			t.Fatal("bytes written again after the key changed were taken for a retry")
		}
	}
	if got := segs; got[0] != 1 || got[1] != 2 || got[2] != 1 || got[3] != 3 || got[4] != 4 {
		t.Fatalf("segments %v, want [1 2 1 3 4]", got)
	}
	// A higher fence starts at 1 again.
	res, err := f.gw.Apply(ctx, f.assigned(2, a, "new owner"))
	if err != nil || res.Receipt.Segment != 1 {
		t.Fatalf("new owner's first write: %+v %v", res.Receipt, err)
	}
}

func TestAdmissibleRefusesASupersededGrantAndWritesNothing(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	old := f.assigned(1, fencegate.ObjectTarget("local", key), "old")
	if err := f.gw.Admissible(ctx, old); err != nil {
		t.Fatalf("current grant: %v", err)
	}
	if _, err := f.gw.Apply(ctx, f.assigned(2, fencegate.ObjectTarget("local", key), "new")); err != nil {
		t.Fatal(err)
	}
	before := f.storedState()
	if err := f.gw.Admissible(ctx, old); fencegate.ErrorCode(err) != fencegate.CodeStaleOwner {
		t.Fatalf("superseded grant: %v, want STALE_OWNER", err)
	}
	if f.storedState() != before {
		t.Fatal("Admissible changed state")
	}
}
