package handlers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
)

// TestEncodedQuestionMarkIsNotAnotherFenceLine: an API call's path is decoded
// once, so %3F becomes '?', which a canonical name allows; a resource
// "payouts/acc_1?" derived from it would be a fence line of its own, while
// the kept request, cut at '?' when sent, is POST /v1/payouts/acc_1: the
// same upstream call as the fenced owner's of "payouts/acc_1". A writer
// superseded there could pay through it. Such a path matches no route: the
// call is refused and nothing reaches the upstream.
func TestEncodedQuestionMarkIsNotAnotherFenceLine(t *testing.T) {
	var mu sync.Mutex
	var got []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" query="+strconv.Quote(r.URL.RawQuery))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"po"}`))
	}))
	defer up.Close()
	e := newAPIEnv(t, nil, nil, func(c *httpapi.APIConfig) {
		c.BaseURL = up.URL
		c.Routes = []httpapi.Route{{Method: "POST", Path: "/v1/payouts/{account}", Resource: "payouts/{account}"}}
	})
	call := func(res string, fence uint64, path string) apiReply {
		tok, vg := e.kit.VerifiedGrant(func(g *fencegate.Grant) {
			g.Resource, g.Owner, g.FenceToken = res, payerA, fence
			g.Lease, g.OperationRoot = "lease-"+res+strconv.FormatUint(fence, 10), "root-"+res+strconv.FormatUint(fence, 10)
		})
		return e.send("POST", path, payerTokA, map[string]string{"Fence-Grant": tok, "Fence-Status": e.kit.Status(vg, nil),
			"Fence-Segment": "1", "Content-Type": "application/json"}, payoutBody)
	}
	if r := call("payouts/acc_1", 6, "/v1/apis/payouts/v1/payouts/acc_1"); r.status != http.StatusOK {
		t.Fatalf("new owner: %d %s", r.status, r.body)
	}
	if r := call("payouts/acc_1", 5, "/v1/apis/payouts/v1/payouts/acc_1"); r.code != string(fencegate.CodeStaleOwner) {
		t.Fatalf("old owner on the fenced resource: %d %s", r.status, r.body)
	}
	r := call("payouts/acc_1?", 1, "/v1/apis/payouts/v1/payouts/acc_1%3F")
	mu.Lock()
	defer mu.Unlock()
	if r.status == http.StatusOK || len(got) != 1 {
		t.Fatalf("a call with %%3F in its path: %d %s; upstream saw %q; want it refused and only the owner's call sent", r.status, r.body, got)
	}
	// Nothing stored for it: no fence line of "payouts/acc_1?", and the
	// owner's resource as its own write left it.
	if _, err := e.store.Resource(context.Background(), "payouts/acc_1?"); fencegate.ErrorCode(err) != fencegate.CodeNotFound {
		t.Fatalf("the refused call left fence state: %v", err)
	}
	if rs, err := e.store.Resource(context.Background(), "payouts/acc_1"); err != nil || rs.HighestFence != 6 || rs.LastSegmentSeq != 1 || rs.PendingReceipt != "" {
		t.Fatalf("payouts/acc_1 after the refused call: %+v, %v", rs, err)
	}
}
