package client

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/domain"
)

// Rule: a keyed write in doubt that turns out not applied frees its segment
// and its key, whichever commit settles the doubt. Settled by an unkeyed
// commit (an SDK call without a key, such as stripe-go's DELETE), the key
// used to keep the freed segment, which the unkeyed write then took: every
// retry of the key was QUARANTINED for the rest of the lease.
func TestAKeyedDoubtSettledByAnUnkeyedCallFreesItsKey(t *testing.T) {
	s := newSDK(t)
	s.f.refuseNext("write", domain.CodeMutationUnknown)
	if _, err := s.post("k1", "a=1"); domain.ErrorCode(err) != domain.CodeMutationUnknown {
		t.Fatalf("k1: %v", err)
	}
	s.f.settle("R1", domain.ReceiptNotApplied) // the reconciler: k1 never happened
	req, _ := http.NewRequest("DELETE", "https://api.example.com/v1/customers/cus_1", nil)
	resp, err := s.hc.Do(req)
	if err != nil {
		t.Fatalf("unkeyed delete: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := s.post("k1", "a=1"); err != nil {
		t.Fatalf("k1 retry: %v", err)
	}
	s.wantSegments("1:k1", "1:", "2:k1")
}

// The same rule when a delegation settles the doubt: the owner's retry of
// the key goes past the delegated segments, never onto one of them.
func TestAKeyedDoubtSettledByADelegationFreesItsKey(t *testing.T) {
	s := newSDK(t)
	l := s.hc.Transport.(*Transport).Lease
	s.f.refuseNext("write", domain.CodeMutationUnknown)
	if _, err := s.post("k1", "a=1"); domain.ErrorCode(err) != domain.CodeMutationUnknown {
		t.Fatalf("k1: %v", err)
	}
	s.f.settle("R1", domain.ReceiptNotApplied)
	if _, err := l.Delegate(t.Context(), DelegateParams{Delegate: "consumer", SegmentFrom: 1, SegmentTo: 3}); err != nil {
		t.Fatalf("delegate: %v", err)
	}
	if _, err := s.post("k1", "a=1"); err != nil {
		t.Fatalf("k1 retry: %v", err)
	}
	if got := strings.Join(s.segments(), " "); got != "1:k1 4:k1" {
		t.Fatalf("writes %q: the retry must go past the delegated segments 1-3", got)
	}
}
