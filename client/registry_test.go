package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/domain"
)

// TestRegistryRoutesShareTheClientsRequestsAndErrors: the gateway routes of
// the registry (attest, s3-resolve, trust-bundle) authenticate with the
// client's token, carry what the request hook adds, answer the body as
// sent (the bundle byte for byte, with every Fence-Bundle-Signature value)
// and decode a refusal into *domain.Error.
func TestRegistryRoutesShareTheClientsRequestsAndErrors(t *testing.T) {
	var auth, hooked, body []string
	bundle := "{\"keys\":[]}\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = append(auth, r.Header.Get("Authorization"))
		hooked = append(hooked, r.Header.Get("X-Request-Id"))
		b := make([]byte, 512)
		n, _ := r.Body.Read(b)
		body = append(body, string(b[:n]))
		switch r.URL.Path {
		case "/v1/leases/l-1/attest":
			w.Write([]byte(`{"statusProof":"p.r.f"}`))
		case "/v1/leases/l-1/s3-resolve":
			w.Write([]byte(`{"state":"HELD","grant":"g","statusProof":"p","secretAccessKey":"s"}`))
		case "/v1/trust-bundle":
			w.Header().Add(domain.BundleSignatureHeader, "h1..s1")
			w.Header().Add(domain.BundleSignatureHeader, "h2..s2")
			w.Write([]byte(bundle))
		default:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"type":"urn:fencegate:problem:not_found","status":404,"code":"NOT_FOUND","detail":"unknown lease"}`))
		}
	}))
	defer srv.Close()
	c := client.New(srv.URL, "gw-token", client.WithRequestHook(func(ctx context.Context, h http.Header) { h.Set("X-Request-Id", "req-7") }))
	ctx := context.Background()
	proof, err := c.Attest(ctx, "l-1", domain.AttestBody{GrantDigest: "d", FenceToken: 3})
	if err != nil || proof != "p.r.f" {
		t.Fatalf("attest = %q, %v", proof, err)
	}
	if !strings.Contains(body[0], `"grantDigest":"d"`) || !strings.Contains(body[0], `"fenceToken":3`) {
		t.Errorf("attest body %s", body[0])
	}
	res, err := c.ResolveS3(ctx, "l-1")
	if err != nil || res.State != domain.StateHeld || res.SecretAccessKey != "s" {
		t.Fatalf("resolve = %+v, %v", res, err)
	}
	b, sig, err := c.TrustBundle(ctx, 1<<20)
	if err != nil || string(b) != bundle || sig != "h1..s1, h2..s2" {
		t.Fatalf("bundle = %q, signature %q, %v", b, sig, err)
	}
	if _, _, err := c.TrustBundle(ctx, 4); domain.ErrorCode(err) != domain.CodeInternal {
		t.Errorf("bundle over the limit: %v, want INTERNAL", err)
	}
	if _, err := c.ResolveS3(ctx, "l-2"); domain.ErrorCode(err) != domain.CodeNotFound {
		t.Errorf("unknown lease: %v, want NOT_FOUND", err)
	}
	for i := range auth {
		if auth[i] != "Bearer gw-token" || hooked[i] != "req-7" {
			t.Errorf("request %d: Authorization %q, hook header %q", i, auth[i], hooked[i])
		}
	}
}

// TestAttestWithoutAProofIsUncertain: a 200 that carries no status proof is
// not the registry's answer, so it is uncertain, not a verdict.
func TestAttestWithoutAProofIsUncertain(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) }))
	defer srv.Close()
	if _, err := client.New(srv.URL, "t").Attest(context.Background(), "l-1", domain.AttestBody{}); !client.IsUncertain(err) {
		t.Fatalf("attest = %v, want uncertain", err)
	}
}

// TestRegistryAnswersAreReadWithinABound: the registry routes a gateway
// asks in query mode read at most 64 KiB of an answer (as the gateway's own
// registry client did before the fold); a longer answer is not the
// registry's and is uncertain, never decoded from an unbounded read.
func TestRegistryAnswersAreReadWithinABound(t *testing.T) {
	big := strings.Repeat("x", 70<<10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/attest"), strings.HasSuffix(r.URL.Path, "/status"):
			w.Write([]byte(`{"statusProof":"` + big + `"}`))
		default:
			w.Write([]byte(`{"state":"HELD","grant":"` + big + `","statusProof":"p","secretAccessKey":"s"}`))
		}
	}))
	defer srv.Close()
	c := client.New(srv.URL, "t")
	ctx := context.Background()
	if p, err := c.Attest(ctx, "l-1", domain.AttestBody{}); !client.IsUncertain(err) {
		t.Errorf("attest of a %d-byte answer = %d bytes, %v; want uncertain", len(big), len(p), err)
	}
	if _, err := c.ResolveS3(ctx, "l-1"); !client.IsUncertain(err) {
		t.Errorf("s3 resolve of a %d-byte answer: %v; want uncertain", len(big), err)
	}
	if _, err := c.DelegationStatus(ctx, "d-1", "g"); !client.IsUncertain(err) {
		t.Errorf("delegation status of a %d-byte answer: %v; want uncertain", len(big), err)
	}
}

// TestALeaseOrDelegationIDIsOnePathSegment: an ID goes into the route as
// one escaped segment, so one that contains a slash or dot segments (an
// S3 access key ID of the FGX kind decodes to any bytes) cannot make the
// gateway's registry client ask another route of the registry.
func TestALeaseOrDelegationIDIsOnePathSegment(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.EscapedPath())
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"type":"urn:fencegate:problem:not_found","status":404,"code":"NOT_FOUND","detail":"unknown"}`))
	}))
	defer srv.Close()
	c := client.New(srv.URL, "t")
	ctx := context.Background()
	id := "x/../../v1/leases/lease_A"
	c.ResolveS3(ctx, id)
	c.Attest(ctx, id, domain.AttestBody{})
	c.DelegationStatus(ctx, id, "g")
	c.RevokeDelegation(ctx, id)
	esc := "x%2F..%2F..%2Fv1%2Fleases%2Flease_A"
	want := []string{"/v1/leases/" + esc + "/s3-resolve", "/v1/leases/" + esc + "/attest",
		"/v1/delegations/" + esc + "/status", "/v1/delegations/" + esc}
	if strings.Join(paths, " ") != strings.Join(want, " ") {
		t.Errorf("paths asked = %q, want %q", paths, want)
	}
}

// TestS3ResolveWithoutAGrantIsUncertain: a 2xx that names no state or no
// grant (an empty body, a 204) is not the registry's answer about the
// lease, so it is uncertain (the gateway: BACKEND_UNAVAILABLE), not a
// grant that then fails verification as a certain GRANT_INVALID.
func TestS3ResolveWithoutAGrantIsUncertain(t *testing.T) {
	for _, answer := range []string{"204", `{}`, `{"state":"HELD"}`} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if answer == "204" {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			w.Write([]byte(answer))
		}))
		if _, err := client.New(srv.URL, "t").ResolveS3(context.Background(), "l-1"); !client.IsUncertain(err) {
			t.Errorf("resolve answered %s: %v, want uncertain", answer, err)
		}
		srv.Close()
	}
}
