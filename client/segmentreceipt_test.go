package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/domain"
)

// receiptsOnly answers GET /v1/receipts?operationId= with listed and GET
// /v1/receipts/{id} from byID (a problem's code for an ID mapped to one,
// NOT_FOUND for an ID not there): a gateway whose listing and lookup can
// disagree, as when the answer named a receipt the listing does not hold.
func receiptsOnly(t *testing.T, listed []domain.Receipt, byID map[string]any) *Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, one := strings.CutPrefix(r.URL.Path, "/v1/receipts/")
		var body any
		switch {
		case one:
			v, ok := byID[id]
			if !ok {
				v = domain.CodeNotFound
			}
			if code, isCode := v.(domain.Code); isCode {
				writeProblemErr(w, &domain.Error{Code: code, Message: "lookup " + id})
				return
			}
			body = v
		case r.URL.Path == "/v1/receipts" && r.URL.Query().Get("operationId") == "op-1":
			body = map[string]any{"receipts": listed}
		default:
			writeProblemErr(w, &domain.Error{Code: domain.CodeNotFound, Message: "no route"})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(srv.Close)
	return New(srv.URL, "tok", WithSleep(noSleep))
}

// seg3 is a receipt at segment 3 of lease L1, fence 7 (operation op-1).
func seg3(id string, state domain.ReceiptState) domain.Receipt {
	return domain.Receipt{ID: id, Lease: "L1", FenceToken: 7, Segment: 3, OperationID: "op-1", State: state}
}

// Rule: SegmentReceipt returns the receipt that decides a segment: of the
// operation's receipts of the lease's lease, fence and segment, COMMITTED
// over PENDING or UNKNOWN over FAILED or NOT_APPLIED (whatever their order);
// another lease's, fence's or segment's receipts are never chosen; with none
// listed, the receipt the uncertain answer named; with none of either, none
// found and no error (the segment is free). A lookup failing otherwise is
// its error, and nothing found.
func TestSegmentReceiptIsTheOneThatDecidesTheSegment(t *testing.T) {
	other := func(id string, mod func(*domain.Receipt)) domain.Receipt {
		r := seg3(id, domain.ReceiptCommitted)
		mod(&r)
		return r
	}
	otherLease := other("Rlease", func(r *domain.Receipt) { r.Lease = "L2" })
	otherFence := other("Rfence", func(r *domain.Receipt) { r.FenceToken = 6 })
	otherSeg := other("Rseg", func(r *domain.Receipt) { r.Segment = 4 })
	named := other("Rnamed", func(r *domain.Receipt) { r.State = domain.ReceiptUnknown })
	for _, tc := range []struct {
		rule     string
		listed   []domain.Receipt
		byID     map[string]any
		named    string
		wantID   string
		wantCode domain.Code
	}{
		{rule: "COMMITTED beats PENDING beats FAILED",
			listed: []domain.Receipt{seg3("Rf", domain.ReceiptFailed), seg3("Rp", domain.ReceiptPending), seg3("Rc", domain.ReceiptCommitted)}, wantID: "Rc"},
		{rule: "COMMITTED beats PENDING, listed first or last",
			listed: []domain.Receipt{seg3("Rc", domain.ReceiptCommitted), seg3("Rp", domain.ReceiptPending)}, wantID: "Rc"},
		{rule: "PENDING beats FAILED",
			listed: []domain.Receipt{seg3("Rf", domain.ReceiptFailed), seg3("Rp", domain.ReceiptPending), seg3("Rn", domain.ReceiptNotApplied)}, wantID: "Rp"},
		{rule: "UNKNOWN beats NOT_APPLIED",
			listed: []domain.Receipt{seg3("Rn", domain.ReceiptNotApplied), seg3("Ru", domain.ReceiptUnknown)}, wantID: "Ru"},
		{rule: "a FAILED receipt alone decides (the segment is free)",
			listed: []domain.Receipt{seg3("Rf", domain.ReceiptFailed)}, named: "Rnamed", byID: map[string]any{"Rnamed": named}, wantID: "Rf"},
		{rule: "another lease's, fence's or segment's receipts are ignored",
			listed: []domain.Receipt{otherLease, otherFence, otherSeg, seg3("Rf", domain.ReceiptFailed)}, wantID: "Rf"},
		{rule: "another lease's, fence's or segment's receipts alone are no receipt",
			listed: []domain.Receipt{otherLease, otherFence, otherSeg}},
		{rule: "none listed: the receipt the answer named",
			listed: []domain.Receipt{otherFence}, named: "Rnamed", byID: map[string]any{"Rnamed": named}, wantID: "Rnamed"},
		{rule: "none listed, the named receipt not found: none found",
			named: "Rgone"},
		{rule: "none listed, none named: none found"},
		{rule: "the named receipt's lookup failing otherwise is its error",
			named: "Rnamed", byID: map[string]any{"Rnamed": domain.CodeLeaseNotHeld}, wantCode: domain.CodeLeaseNotHeld},
	} {
		t.Run(tc.rule, func(t *testing.T) {
			c := receiptsOnly(t, tc.listed, tc.byID)
			info := LeaseInfo{Lease: "L1", FenceToken: 7, OperationID: "op-1"}
			r, found, err := c.SegmentReceipt(context.Background(), info, 3, tc.named)
			if tc.wantCode != "" {
				if domain.ErrorCode(err) != tc.wantCode || found {
					t.Fatalf("got receipt %q (found %v), error %v; want %s", r.ID, found, err, tc.wantCode)
				}
				return
			}
			if err != nil || found != (tc.wantID != "") || r.ID != tc.wantID {
				t.Fatalf("got receipt %q (%s, found %v), error %v; want %q", r.ID, r.State, found, err, tc.wantID)
			}
		})
	}
}

// Rule: a receipt list that itself fails NOT_FOUND (a route missing behind
// a proxy, an older gateway) is never taken for "the segment is free": the
// answer is INTERNAL and the segment stays in doubt.
func TestSegmentReceiptOfAFailedListIsNotAFreeSegment(t *testing.T) {
	c := receiptsOnly(t, nil, nil)
	info := LeaseInfo{Lease: "L1", FenceToken: 7, OperationID: "op-unlisted"} // the fake has no route for it
	if _, found, err := c.SegmentReceipt(context.Background(), info, 3, ""); domain.ErrorCode(err) != domain.CodeInternal || found {
		t.Fatalf("a list answered NOT_FOUND: found %v, %v; want INTERNAL (still in doubt)", found, err)
	}
}

// Rule: InDoubtAfter is true for exactly the answers that may have admitted
// a write (no intact answer, MUTATION_UNKNOWN, INTERNAL), false for a
// refusal and for no error.
func TestInDoubtAfterIsTrueOnlyForAnswersThatMayHaveAdmitted(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&UncertainError{Op: "put", Err: io.ErrUnexpectedEOF}, true},
		{fmt.Errorf("wrapped: %w", &UncertainError{Op: "put", Err: io.EOF}), true},
		{&domain.Error{Code: domain.CodeMutationUnknown}, true},
		{&domain.Error{Code: domain.CodeInternal}, true},
		{&domain.Error{Code: domain.CodeStaleOwner}, false},
		{&domain.Error{Code: domain.CodeResourceBusy}, false},
		{&domain.Error{Code: domain.CodeNotFound}, false},
	} {
		if got := InDoubtAfter(tc.err); got != tc.want {
			t.Errorf("InDoubtAfter(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// Rule: a receipt records a write when it has the write's method and target
// and, for a write with a body, its payload digest; a write without a body
// (a delete) is recorded whatever digest the receipt holds; a write with a
// body whose digest is not known is recorded by none, not even a receipt
// without a digest. An API call's receipt may add the headers its route
// binds to the target (domain.SameCallTarget).
func TestRecordsWriteIsTheSameMethodTargetAndPayload(t *testing.T) {
	put := domain.Receipt{Method: "PUT", Target: "objects/b/k", PayloadDigest: "sha256:aa"}
	del := domain.Receipt{Method: "DELETE", Target: "objects/b/k"}
	undigested := domain.Receipt{Method: "PUT", Target: "objects/b/k"}
	for _, tc := range []struct {
		rule                   string
		r                      domain.Receipt
		method, target, digest string
		body                   bool
		want                   bool
	}{
		{"the same write", put, "PUT", "objects/b/k", "sha256:aa", true, true},
		{"another body", put, "PUT", "objects/b/k", "sha256:bb", true, false},
		{"another method", put, "POST", "objects/b/k", "sha256:aa", true, false},
		{"another target", put, "PUT", "objects/b/other", "sha256:aa", true, false},
		{"a write without a body", del, "DELETE", "objects/b/k", "", false, true},
		{"a write without a body, a receipt with a digest", domain.Receipt{Method: "DELETE", Target: "objects/b/k", PayloadDigest: "sha256:aa"},
			"DELETE", "objects/b/k", "", false, true},
		{"a write without a body, another method", del, "PUT", "objects/b/k", "", false, false},
		{"a body whose digest is unknown", put, "PUT", "objects/b/k", "", true, false},
		{"a body whose digest is unknown, a receipt without a digest", undigested, "PUT", "objects/b/k", "", true, false},
		{"an API call on a route that binds a header", domain.Receipt{Method: "POST", Target: "apis/stripe/v1/payouts#stripe-account=acct_A", PayloadDigest: "sha256:aa"},
			"POST", "apis/stripe/v1/payouts", "sha256:aa", true, true},
		{"an object key holding '#'", domain.Receipt{Method: "PUT", Target: "objects/b/k#x", PayloadDigest: "sha256:aa"},
			"PUT", "objects/b/k", "sha256:aa", true, false},
	} {
		if got := RecordsWrite(tc.r, tc.method, tc.target, tc.digest, tc.body); got != tc.want {
			t.Errorf("%s: RecordsWrite = %v, want %v", tc.rule, got, tc.want)
		}
	}
}

// Rule: ReceiptIDOf is the receipt the first *domain.Error in the chain
// names, "" for an error naming none or another error.
func TestReceiptIDOfIsTheReceiptTheErrorNames(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{io.EOF, ""},
		{&domain.Error{Code: domain.CodeMutationUnknown}, ""},
		{&domain.Error{Code: domain.CodeMutationUnknown, ReceiptID: "R9"}, "R9"},
		{fmt.Errorf("put: %w", &domain.Error{Code: domain.CodeQuarantined, ReceiptID: "R3"}), "R3"},
	} {
		if got := ReceiptIDOf(tc.err); got != tc.want {
			t.Errorf("ReceiptIDOf(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
