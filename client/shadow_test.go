package client

import (
	"context"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/domain"
)

// writeSegments lists the Fence-Segment of every write the fake saw.
func writeSegments(f *fakeGateway) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, h := range f.writes {
		out = append(out, h.Get("Fence-Segment"))
	}
	return out
}

// Rule: shadow mode's answer to a write it refused (forwarded anyway, with
// an unstored "shadow_" receipt and Fence-Verdict) admits no segment, so the
// lease's next write keeps the number. The client used to move on, and one
// shadowed refusal made every later write of the lease SEGMENT_OUT_OF_ORDER:
// a false verdict per write, and refusals once the pattern was enforced.
func TestAShadowVerdictLeavesTheSegmentToTheNextWrite(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	w := l.Objects("bucket")
	f.refuseNext("write", shadowCode+domain.CodeResourceMismatch)
	rc, err := w.Put(ctx, "elsewhere/x", strings.NewReader("a"), "")
	if err != nil || !strings.HasPrefix(rc.ID, "shadow_") {
		t.Fatalf("shadowed put: receipt %q, %v", rc.ID, err)
	}
	if n := l.NextSegment(); n != 1 {
		t.Fatalf("after a shadowed write the next segment is %d, want 1", n)
	}
	if _, err := w.Put(ctx, "jobs/a", strings.NewReader("b"), ""); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(writeSegments(f), " "); got != "1 1" {
		t.Fatalf("segments sent %q, want \"1 1\"", got)
	}
	if n := l.NextSegment(); n != 2 {
		t.Fatalf("after an admitted write the next segment is %d, want 2", n)
	}
}

// The same rule for writes through the Transport (an SDK's keyed calls): a
// key shadow mode forwarded takes no segment.
func TestAShadowedKeyedCallTakesNoSegment(t *testing.T) {
	s := newSDK(t)
	s.f.refuseNext("write", shadowCode+domain.CodeSegmentOutOfOrder)
	if _, err := s.post("k1", "a=1"); err != nil {
		t.Fatalf("shadowed call: %v", err)
	}
	if _, err := s.post("k2", "a=2"); err != nil {
		t.Fatal(err)
	}
	s.wantSegments("1:k1", "1:k2")
}
