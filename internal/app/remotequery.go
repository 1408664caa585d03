package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs"
)

// remoteQuerier is query mode against a registry in another process: it asks
// the registry for the grant's lease now (GET /v1/leases/{lease}) and checks
// the freshly signed status proof it answers against the trust bundle, so the
// answer is as linearizable as the registry's read and cannot be forged by
// the network.
type remoteQuerier struct {
	base     string
	token    string
	verifier *proofs.Verifier
	hc       *http.Client
}

var _ gateway.StatusQuerier = (*remoteQuerier)(nil)

func (q *remoteQuerier) GrantStatus(ctx context.Context, g fencegate.VerifiedGrant) (fencegate.Status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, q.base+"/v1/leases/"+url.PathEscape(g.Lease), nil)
	if err != nil {
		return fencegate.Status{}, fencegate.Wrap(err, fencegate.CodeInternal, "registry query")
	}
	req.Header.Set("Authorization", "Bearer "+q.token)
	resp, err := q.hc.Do(req)
	if err != nil {
		return fencegate.Status{}, fencegate.Wrap(err, fencegate.CodeStatusInvalid, "the registry could not be asked for the lease's status")
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fencegate.Status{}, fencegate.Wrap(err, fencegate.CodeStatusInvalid, "registry answer unreadable")
	}
	if resp.StatusCode == http.StatusNotFound {
		return fencegate.Status{}, fencegate.Errorf(fencegate.CodeStatusInvalid, "the registry does not know lease %q", g.Lease)
	}
	if resp.StatusCode != http.StatusOK {
		return fencegate.Status{}, fencegate.Errorf(fencegate.CodeStatusInvalid, "registry answered %d to a status query", resp.StatusCode)
	}
	var a struct {
		StatusProof string `json:"statusProof"`
	}
	if err := json.Unmarshal(body, &a); err != nil || a.StatusProof == "" {
		return fencegate.Status{}, fencegate.Errorf(fencegate.CodeStatusInvalid, "registry answer carries no status proof")
	}
	st, err := q.verifier.VerifyStatus(a.StatusProof, g)
	var fe *fencegate.Error
	if err != nil && !errors.As(err, &fe) {
		err = fencegate.Wrap(err, fencegate.CodeStatusInvalid, "registry status proof")
	}
	return st, err
}

func newRemoteQuerier(base, token string, v *proofs.Verifier) (*remoteQuerier, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("registryURL %q is not an http(s) URL", base)
	}
	return &remoteQuerier{base: u.String(), token: token, verifier: v, hc: &http.Client{Timeout: 5 * time.Second}}, nil
}
