package gateway_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

func refusal(caller, res string, at int) gateway.Refusal {
	return gateway.Refusal{At: time.Unix(int64(at), 0), Caller: caller, Resource: res, Code: fencegate.CodeStaleOwner}
}

func TestJournalFloodEvictsOnlyTheFloodersOwnRefusals(t *testing.T) {
	j := gateway.NewJournal(10)
	j.Record(refusal("victim", "local/a", 1))
	j.Record(refusal("victim", "local/b", 2))
	for i := 0; i < 1000; i++ {
		j.Record(refusal("flooder", fmt.Sprintf("local/f%d", i%7), 10+i))
	}
	if j.Len() != 10 {
		t.Fatalf("journal holds %d, want its size 10", j.Len())
	}
	if a, b := j.Of("local/a"), j.Of("local/b"); len(a) != 1 || len(b) != 1 || a[0].Caller != "victim" {
		t.Fatalf("the victim's refusals were evicted by a flood: %v %v", a, b)
	}
	// The flooder keeps its newest ones: i=993 was its last on local/f6.
	if got := j.Of("local/f6"); len(got) == 0 || got[0].At != time.Unix(1003, 0) {
		t.Fatalf("flooder's newest not kept: %v", got)
	}
}

func TestJournalEvictsFromTheBiggestCallerOldestFirst(t *testing.T) {
	j := gateway.NewJournal(4)
	j.Record(refusal("a", "r", 1))
	j.Record(refusal("b", "r", 2))
	j.Record(refusal("b", "r", 3))
	j.Record(refusal("b", "r", 5))
	j.Record(refusal("a", "r", 6)) // over: b holds most, its oldest (2) goes
	got := j.Of("r")
	if len(got) != 4 || got[0].At.Unix() != 6 || got[1].At.Unix() != 5 || got[2].At.Unix() != 3 || got[3].At.Unix() != 1 {
		t.Fatalf("kept %v, want times 6, 5, 3, 1 newest first", got)
	}
}

func TestJournalClipsLongFields(t *testing.T) {
	j := gateway.NewJournal(1)
	r := refusal("a", "r", 1)
	r.Detail = string(make([]byte, 10000))
	j.Record(r)
	if d := j.Of("r")[0].Detail; len(d) > 600 {
		t.Fatalf("detail of %d bytes kept", len(d))
	}
}

func TestStaleWriteIsJournaledWithItsGrantAndUnauthenticatedNoiseIsNot(t *testing.T) {
	f := newFixture(t)
	if _, err := f.gw.Apply(context.Background(), f.request(2, 1, "new")); err != nil {
		t.Fatal(err)
	}
	_, err := f.gw.Apply(context.Background(), f.request(1, 1, "old"))
	if fencegate.ErrorCode(err) != fencegate.CodeStaleOwner {
		t.Fatalf("stale write: %v", err)
	}
	forged := f.request(3, 1, "forged")
	forged.GrantToken = "not-a-grant"
	if _, err := f.gw.Apply(context.Background(), forged); fencegate.ErrorCode(err) != fencegate.CodeGrantInvalid {
		t.Fatalf("forged grant: %v", err)
	}
	got := f.gw.Refusals().Of(resource)
	if len(got) != 1 || got[0].Code != fencegate.CodeStaleOwner || got[0].FenceToken != 1 || got[0].Lease != "lease-1" || got[0].Caller != owner || got[0].Shadow {
		t.Fatalf("journal of %s: %+v", resource, got)
	}
	noStatus := f.request(1, 2, "old")
	noStatus.StatusToken = ""
	if err := f.gw.Precheck(context.Background(), noStatus); fencegate.ErrorCode(err) != fencegate.CodeStaleOwner {
		t.Fatalf("precheck of a stale write: %v", err)
	}
	if n := len(f.gw.Refusals().Of(resource)); n != 2 {
		t.Fatalf("a refusal at precheck is journaled too: %d kept", n)
	}
}

// Rule: the journal files a refusal under the resource's whole name (names
// may be fencegate.MaxNameLength bytes): clipped to the display width, a
// long name's timeline showed none of its refusals, and two resources
// sharing their first 512 bytes were filed as one.
func TestTheJournalKeepsLongResourceNamesApart(t *testing.T) {
	j := gateway.NewJournal(0)
	prefix := "local/" + strings.Repeat("a", 520)
	a, b := prefix+"/tenant-a", prefix+"/tenant-b"
	j.Record(gateway.Refusal{At: time.Unix(1, 0), Resource: a, Caller: "w1", Code: fencegate.CodeStaleOwner})
	if got := j.Of(a); len(got) != 1 {
		t.Errorf("Of(a) = %d refusals, want 1", len(got))
	}
	if got := j.Of(b); len(got) != 0 {
		t.Errorf("Of(b) = %d refusals of another resource", len(got))
	}
}
