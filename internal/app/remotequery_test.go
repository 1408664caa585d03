package app

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/logctx"
)

// TestRegistryQueryCarriesTheRequestIDAndTrace: a status query a gateway
// makes for a request names that request (X-Request-Id) and continues its
// trace (traceparent), so the registry's lines and spans join the gateway's.
func TestRegistryQueryCarriesTheRequestIDAndTrace(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	q, err := newRemoteQuerier(srv.URL, "gw-token", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("t").Start(logctx.WithRequest(context.Background(), "req-42"), "write")
	defer span.End()
	_, _ = q.GrantStatus(ctx, fencegate.VerifiedGrant{Grant: fencegate.Grant{Lease: "l-1"}})
	if got.Get("X-Request-Id") != "req-42" {
		t.Errorf("X-Request-Id %q", got.Get("X-Request-Id"))
	}
	if tp := got.Get("traceparent"); len(tp) != 55 || tp[3:35] != span.SpanContext().TraceID().String() {
		t.Errorf("traceparent %q, want trace %s", tp, span.SpanContext().TraceID())
	}
}

// TestRegistryQueryPassesOnVerdictsAndTheRestIsBackendUnavailable: through
// the client module's registry client, the registry's verdicts on a grant
// (STATUS_INVALID, DELEGATION_INVALID) and on a lease (NOT_FOUND for an S3
// resolve) are passed on with their codes; a 5xx, another refusal, a
// foreign answer or an answer without a proof is BACKEND_UNAVAILABLE, never
// a verdict on the lease.
func TestRegistryQueryPassesOnVerdictsAndTheRestIsBackendUnavailable(t *testing.T) {
	problem := func(status int, code string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"type":"urn:fencegate:problem:%s","status":%d,"code":%q,"detail":"said the registry"}`, strings.ToLower(code), status, code)
		}
	}
	for _, tc := range []struct {
		name              string
		h                 http.HandlerFunc
		status, deleg, s3 fencegate.Code
	}{
		{"status invalid", problem(409, "STATUS_INVALID"), fencegate.CodeStatusInvalid, fencegate.CodeStatusInvalid, fencegate.CodeBackendUnavailable},
		{"delegation invalid", problem(403, "DELEGATION_INVALID"), fencegate.CodeDelegationInvalid, fencegate.CodeDelegationInvalid, fencegate.CodeBackendUnavailable},
		{"not found", problem(404, "NOT_FOUND"), fencegate.CodeBackendUnavailable, fencegate.CodeBackendUnavailable, fencegate.CodeNotFound},
		{"forbidden", problem(403, "FORBIDDEN"), fencegate.CodeBackendUnavailable, fencegate.CodeBackendUnavailable, fencegate.CodeBackendUnavailable},
		{"registry 500", problem(500, "INTERNAL"), fencegate.CodeBackendUnavailable, fencegate.CodeBackendUnavailable, fencegate.CodeBackendUnavailable},
		{"proxy 502", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "bad gateway", 502) }, fencegate.CodeBackendUnavailable, fencegate.CodeBackendUnavailable, fencegate.CodeBackendUnavailable},
		{"no proof", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) }, fencegate.CodeBackendUnavailable, fencegate.CodeBackendUnavailable, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.h)
			defer srv.Close()
			q, err := newRemoteQuerier(srv.URL, "gw-token", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			g := fencegate.VerifiedGrant{Grant: fencegate.Grant{Lease: "l-1"}}
			if _, err := q.GrantStatus(context.Background(), g); fencegate.ErrorCode(err) != tc.status {
				t.Errorf("attest: %v, want %s", err, tc.status)
			}
			if _, err := q.GrantDelegationStatus(context.Background(), g, fencegate.Delegation{ID: "d-1"}); fencegate.ErrorCode(err) != tc.deleg {
				t.Errorf("delegation status: %v, want %s", err, tc.deleg)
			}
			if _, err := q.ResolveS3(context.Background(), "l-1"); tc.s3 != "" && fencegate.ErrorCode(err) != tc.s3 {
				t.Errorf("s3 resolve: %v, want %s", err, tc.s3)
			}
		})
	}
}

// TestRemoteQueryStatesARevokedLeaseAsTheRegistryDoes: a gateway asking a
// registry in another process gets the registry's signed statement of any
// state as a verified answer, as one with the registry in process does: a
// lease whose epoch was retired is stated REVOKED (which the gateway
// answers EPOCH_REVOKED, so the client drops its lease), not a broken proof
// (STATUS_INVALID), and a released one RELEASED.
func TestRemoteQueryStatesARevokedLeaseAsTheRegistryDoes(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()
	q, err := newRemoteQuerier(w.srv.URL, "token-gw", w.app.auth.Verifier(), nil)
	if err != nil {
		t.Fatal(err)
	}
	verify := func(a fencegate.LeaseAnswer) fencegate.VerifiedGrant {
		vg, err := w.app.auth.Verifier().VerifyGrant(a.Grant)
		if err != nil {
			t.Fatal(err)
		}
		return vg
	}
	held, released := w.acquire("token-a", "local/reports/20", "r-1"), w.acquire("token-b", "local/reports/21", "r-2")
	heldGrant, releasedGrant := verify(held), verify(released)
	if st, err := q.GrantStatus(ctx, heldGrant); err != nil || st.State != fencegate.StateHeld {
		t.Fatalf("a held lease: %+v %v", st, err)
	}
	w.call("DELETE", "/v1/leases/"+released.Lease, "token-b", "")
	if st, err := q.GrantStatus(ctx, releasedGrant); err != nil || st.State != fencegate.StateReleased {
		t.Fatalf("a released lease: %s %v; want the registry's RELEASED", st.State, err)
	}
	if _, err := w.app.auth.RetireEpoch(ctx, heldGrant.IssuerEpoch); err != nil {
		t.Fatal(err)
	}
	if st, err := q.GrantStatus(ctx, heldGrant); err != nil || st.State != fencegate.StateRevoked {
		t.Fatalf("a lease of a retired epoch: %s %v; want the registry's REVOKED", st.State, err)
	}
}
