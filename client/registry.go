package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate/domain"
)

// The registry's gateway routes: what a gateway in query mode (or any
// replica configured with a registryURL) asks a registry in another process,
// authenticated with a gateway identity's token. They go through the same
// request builder, authentication and problem+json decoding as every other
// call of this package, so the gateway and the worker share one registry HTTP
// client.

// maxRegistryAnswer bounds the answer of a registry route a gateway asks in
// query mode (a status proof, an S3 resolution): a longer one is uncertain.
const maxRegistryAnswer = 64 << 10

// Attest is POST /v1/leases/{lease}/attest: the registry's signed status
// proof for the grant b names, stated now. The registry's verdict on the
// grant (STATUS_INVALID) is a *domain.Error.
func (c *Client) Attest(ctx context.Context, lease string, b domain.AttestBody) (string, error) {
	var out domain.AttestAnswer
	if err := c.do(ctx, request{op: "attest", method: http.MethodPost, path: "/v1/leases/" + escapeID(lease) + "/attest", json: b, limit: maxRegistryAnswer}, &out); err != nil {
		return "", err
	}
	if out.StatusProof == "" {
		return "", &UncertainError{Op: "attest", Err: fmt.Errorf("answer carries no status proof")}
	}
	return out.StatusProof, nil
}

// ResolveS3 is POST /v1/leases/{lease}/s3-resolve (gateway identities
// only): the lease's state, current grant, a status proof signed now and its
// S3 credentials' secret. An unknown lease is NOT_FOUND; an answer that
// names no state or grant is uncertain.
func (c *Client) ResolveS3(ctx context.Context, lease string) (domain.S3Resolution, error) {
	var out domain.S3Resolution
	err := c.do(ctx, request{op: "s3 resolve", method: http.MethodPost, path: "/v1/leases/" + escapeID(lease) + "/s3-resolve", limit: maxRegistryAnswer}, &out)
	if err == nil && (out.State == "" || out.Grant == "") {
		// Not the registry's answer about the lease (an empty body, a 204).
		return domain.S3Resolution{}, &UncertainError{Op: "s3 resolve", Err: fmt.Errorf("answer names no lease state or grant")}
	}
	return out, err
}

// TrustBundle is GET /v1/trust-bundle (gateway identities only): the
// registry's trust bundle, byte for byte as answered, at most limit bytes
// (a longer answer is an error), and its signature as answered in the
// Fence-Bundle-Signature header ("" when there is none: a registry too old
// to sign). The caller verifies both.
func (c *Client) TrustBundle(ctx context.Context, limit int64) (bundle []byte, signature string, err error) {
	resp, err := c.send(ctx, request{op: "trust bundle", method: http.MethodGet, path: "/v1/trust-bundle"})
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", answerError("trust bundle", resp)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, "", &UncertainError{Op: "trust bundle", Err: err}
	}
	if int64(len(raw)) > limit {
		return nil, "", domain.Errorf(domain.CodeInternal, "trust bundle: answer larger than %d bytes", limit)
	}
	return raw, strings.Join(resp.Header.Values(domain.BundleSignatureHeader), ", "), nil
}

// TrustBundleChain is GET /v1/trust-bundle/chain?after=V (gateway identities
// only): the trust bundles the registry published after version after,
// oldest first, each with its signature, the answer at most limit bytes (a
// longer one is uncertain). A registry that keeps no unbroken chain from
// after answers NOT_FOUND (a *domain.Error); so does one older than the
// route. The caller verifies every link.
func (c *Client) TrustBundleChain(ctx context.Context, after uint64, limit int64) (domain.BundleChain, error) {
	var out domain.BundleChain
	q := url.Values{"after": {strconv.FormatUint(after, 10)}}
	err := c.do(ctx, request{op: "trust bundle chain", method: http.MethodGet, path: "/v1/trust-bundle/chain", query: q, limit: limit}, &out)
	return out, err
}
