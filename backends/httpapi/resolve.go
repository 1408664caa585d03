package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// Target is the receipt target of a call to path on api: "apis/<api>/<path>"
// (path without its leading slash).
func Target(api, path string) string {
	return "apis/" + api + "/" + strings.TrimPrefix(path, "/")
}

// SplitTarget is the inverse of Target; path comes back with its leading slash.
func SplitTarget(target string) (api, path string, ok bool) {
	rest, ok := strings.CutPrefix(target, "apis/")
	if !ok {
		return "", "", false
	}
	api, path, ok = strings.Cut(rest, "/")
	if !ok || api == "" || path == "" {
		return "", "", false
	}
	return api, "/" + path, true
}

var _ gateway.Resolver = (*API)(nil)

// Resolve settles an unknown outcome through the effect query with the
// receipt's idempotency key: a 2xx answer proves COMMITTED and becomes the
// stored answer; a 404 proves NOT_APPLIED only once the receipt is older than
// NotAppliedAfter (a late request may still land) and, for idempotency APIs,
// younger than the key retention (after it the upstream may have forgotten
// the key). Anything else leaves it UNKNOWN.
func (a *API) Resolve(ctx context.Context, r fencegate.Receipt) (fencegate.Outcome, error) {
	still := fencegate.Outcome{State: fencegate.ReceiptUnknown}
	q := a.effectQuery()
	if q == nil {
		return still, fencegate.Errorf(fencegate.CodeUnsupported, "api %q has no effect query; an operator must resolve %s", a.cfg.Name, r.ID)
	}
	path, rawQuery, _ := strings.Cut(strings.ReplaceAll(q.URL, "{key}", url.QueryEscape(IdempotencyKey(r))), "?")
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, strings.ToUpper(q.Method), a.endpoint(path, rawQuery), http.NoBody)
	if err != nil {
		return still, fencegate.Wrap(err, fencegate.CodeInternal, "cannot build the effect query")
	}
	req.Header = a.forwardHeader(nil)
	resp, err := a.client.Do(req)
	if err != nil {
		return still, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("api %q: effect query failed", a.cfg.Name))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		er, err := a.readAnswer(resp)
		if err != nil {
			return still, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("api %q: effect query answer broke off", a.cfg.Name))
		}
		return fencegate.Outcome{State: fencegate.ReceiptCommitted, Response: er}, nil
	case resp.StatusCode == http.StatusNotFound:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, a.cfg.MaxResponseBytes))
		age := a.now().Sub(r.CreatedAt)
		grace := q.NotAppliedAfter
		if grace == 0 {
			grace = a.cfg.Timeout
		}
		if age < grace {
			return still, nil
		}
		if id := a.cfg.Contract.Idempotency; id != nil && q == id.EffectQuery && age >= id.KeyRetention {
			return still, fencegate.Errorf(fencegate.CodeMutationUnknown, "api %q: receipt %s is older than the key retention; an operator must resolve it", a.cfg.Name, r.ID)
		}
		return fencegate.Outcome{State: fencegate.ReceiptNotApplied, Error: "the effect query found no effect for key " + IdempotencyKey(r)}, nil
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, a.cfg.MaxResponseBytes))
	return still, fencegate.Errorf(fencegate.CodeBackendUnavailable, "api %q: effect query answered %s", a.cfg.Name, resp.Status)
}

func (a *API) effectQuery() *EffectQuery {
	if id := a.cfg.Contract.Idempotency; id != nil && id.EffectQuery != nil {
		return id.EffectQuery
	}
	if nf := a.cfg.Contract.NativeFence; nf != nil {
		return nf.EffectQuery
	}
	return nil
}

// Resolvers maps receipt targets to the API that settles them, by name.
type Resolvers map[string]*API

// For returns the API resolving target, or nil when target is not an API
// target of a configured API; use it as gateway.Reconciler.Resolver.
func (rs Resolvers) For(target string) gateway.Resolver {
	name, _, ok := SplitTarget(target)
	if !ok {
		return nil
	}
	if a := rs[name]; a != nil {
		return a
	}
	return nil
}

// Or returns a resolver picker trying rs first, then next (nil for none).
func (rs Resolvers) Or(next func(target string) gateway.Resolver) func(target string) gateway.Resolver {
	return func(target string) gateway.Resolver {
		if r := rs.For(target); r != nil {
			return r
		}
		if next != nil {
			return next(target)
		}
		return nil
	}
}
