package client

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/domain"
)

// committedSegments maps the fake gateway's COMMITTED segments to their receipts.
func committedSegments(f *fakeGateway) map[uint64]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[uint64]string{}
	for _, r := range f.receipts {
		if r.State == domain.ReceiptCommitted {
			out[r.Segment] = r.ID
		}
	}
	return out
}

// Rule: a delegation never covers a segment the owner holds: one whose
// write's answer was lost is settled first (found admitted, the delegation
// starts past it, so NextSegment's ask is refused and the next one
// granted), and a range below the lease's next segment is INVALID_REQUEST
// without asking the registry.
func TestDelegateNeverCoversASegmentTheOwnerHolds(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	objs := l.Objects("bucket")
	if _, err := objs.Put(ctx, "jobs/a", strings.NewReader("1"), ""); err != nil {
		t.Fatal(err)
	}
	f.loseNext("write")
	if _, err := objs.Put(ctx, "jobs/b", strings.NewReader("2"), ""); !IsUncertain(err) {
		t.Fatalf("lost answer: %v, want uncertain", err)
	}
	from := l.NextSegment() // 2: the lost write's, as far as the lease knows
	_, err := l.Delegate(ctx, DelegateParams{Delegate: "consumer", SegmentFrom: from, SegmentTo: 9})
	if domain.ErrorCode(err) != domain.CodeInvalidRequest {
		t.Fatalf("delegating %d..9 while segment 2 (receipt %s) was in doubt and is admitted: %v, want INVALID_REQUEST",
			from, committedSegments(f)[2], err)
	}
	if f.count("delegate") != 0 {
		t.Fatal("the registry was asked for a delegation over the owner's segment")
	}
	d, err := l.Delegate(ctx, DelegateParams{Delegate: "consumer", SegmentFrom: l.NextSegment(), SegmentTo: 9})
	if err != nil || d.Claims.SegmentFrom != 3 {
		t.Fatalf("delegating from the next segment after the doubt: %+v %v, want from 3", d.Claims, err)
	}
	if got := l.NextSegment(); got != 10 {
		t.Fatalf("the owner's next segment after delegating 3..9: %d, want 10", got)
	}
	if _, err := l.Delegate(ctx, DelegateParams{Delegate: "consumer", Segments: []uint64{12, 4}}); domain.ErrorCode(err) != domain.CodeInvalidRequest {
		t.Fatalf("a segment set reaching below the next segment: %v, want INVALID_REQUEST", err)
	}
}

// Rule: delegated segments run without a hole from the lease's next
// segment. The gateway admits only the segment after the last one, so a
// skipped segment (a range starting past NextSegment, a set with a hole)
// would belong to nobody and stall both the owner and the delegate: such
// an ask is INVALID_REQUEST without asking the registry, and the owner's
// numbering does not move.
func TestDelegatedSegmentsLeaveNoHole(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	if _, err := l.Objects("bucket").Put(ctx, "jobs/a", strings.NewReader("1"), ""); err != nil {
		t.Fatal(err)
	}
	next := l.NextSegment() // 2
	for name, p := range map[string]DelegateParams{
		"a range past the next segment": {SegmentFrom: next + 3, SegmentTo: next + 5},
		"a set with a hole":             {Segments: []uint64{next, next + 2}},
		"a set past the next segment":   {Segments: []uint64{next + 1, next + 2}},
	} {
		p.Delegate = "consumer"
		if _, err := l.Delegate(ctx, p); domain.ErrorCode(err) != domain.CodeInvalidRequest {
			t.Fatalf("%s: %v, want INVALID_REQUEST", name, err)
		}
		if got := l.NextSegment(); got != next {
			t.Fatalf("%s: the owner's next segment moved to %d from %d", name, got, next)
		}
	}
	if f.count("delegate") != 0 {
		t.Fatal("the registry was asked for a delegation with a hole")
	}
	d, err := l.Delegate(ctx, DelegateParams{Delegate: "consumer", Segments: []uint64{next + 1, next}})
	if err != nil || l.NextSegment() != next+2 {
		t.Fatalf("a set of the next two segments, in any order: %+v %v, next %d", d.Claims, err, l.NextSegment())
	}
}

// Rule: segments no delegation may name (domain.CheckDelegatedSegments)
// are refused DELEGATION_INVALID, as the registry would refuse them, without
// asking it, and the owner's numbering does not move.
func TestSegmentsNoDelegationMayNameAreRefusedBeforeAsking(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	next := l.NextSegment()
	long := make([]uint64, domain.MaxDelegationSegments+1)
	for i := range long {
		long[i] = next + uint64(i)
	}
	for name, p := range map[string]DelegateParams{
		"neither a range nor a set":    {},
		"both a range and a set":       {SegmentFrom: next, SegmentTo: next, Segments: []uint64{next}},
		"an empty range":               {SegmentFrom: next + 1, SegmentTo: next},
		"a set naming a segment twice": {Segments: []uint64{next, next}},
		"a set longer than allowed":    {Segments: long},
	} {
		p.Delegate = "consumer"
		if _, err := l.Delegate(ctx, p); domain.ErrorCode(err) != domain.CodeDelegationInvalid {
			t.Fatalf("%s: %v, want DELEGATION_INVALID", name, err)
		}
		if got := l.NextSegment(); got != next {
			t.Fatalf("%s: the owner's next segment moved to %d from %d", name, got, next)
		}
	}
	if f.count("delegate") != 0 {
		t.Fatal("the registry was asked for segments no delegation may name")
	}
}

// Rule: no commit of the owner runs while a delegation is being minted: an
// owner's write started during the mint is numbered after the delegated
// range, never inside it.
func TestAnOwnersWriteDuringTheMintIsNumberedAfterIt(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	if _, err := l.Objects("bucket").Put(ctx, "jobs/a", strings.NewReader("1"), ""); err != nil {
		t.Fatal(err)
	}
	g := f.hold("delegate")
	minted := make(chan error, 1)
	go func() {
		_, err := l.Delegate(ctx, DelegateParams{Delegate: "consumer", SegmentFrom: 2, SegmentTo: 9})
		minted <- err
	}()
	<-g.entered
	wrote := make(chan error, 1)
	var seg uint64
	go func() {
		rc, err := l.Objects("bucket").Put(ctx, "jobs/b", strings.NewReader("2"), "")
		seg = rc.Segment
		wrote <- err
	}()
	close(g.release)
	if err := <-minted; err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil || seg != 10 {
		t.Fatalf("the owner's write during the mint of 2..9: segment %d (%v), want 10", seg, err)
	}
}
