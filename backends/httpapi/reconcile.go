package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate"
)

// SettledByHeader names, in a stored answer, how an unknown outcome was
// settled when the answer is not the call's own ("lookup", "conflict-fetch").
const SettledByHeader = "Fence-Settled-By"

// Resends is the number of same-key resends this API has made.
func (a *API) Resends() int64 { return a.resends.Load() }

// settleFor is the Settle of the route r was admitted on, found as the call
// was, with the headers its kept request was sent with (a route that binds a
// header is told apart from one on the same path that does not); else the
// first route of its method and path (a receipt kept without a request), or
// the API's when the route is not found any more.
func (a *API) settleFor(r fencegate.Receipt) Settle {
	_, path, ok := fencegate.SplitAPITarget(r.Target)
	if !ok {
		return a.cfg.Settle
	}
	if r.Request != nil {
		if rt, _, ok := a.route(r.Method, path, http.Header(r.Request.Header)); ok {
			return rt.settle
		}
	}
	p, _ := strings.CutPrefix(path, "/")
	parts := strings.Split(p, "/")
	for i := range a.routes {
		if _, ok := a.routes[i].match(r.Method, parts); ok {
			return a.routes[i].settle
		}
	}
	return a.cfg.Settle
}

// Resolve settles an unknown (or orphaned PENDING) outcome by the strategy of
// the receipt's route. It returns State UNKNOWN when nothing is proved; the
// error is set only when the attempt itself failed and nothing was learnt.
//
//   - resend / conflict-fetch: the kept request is sent again under the same
//     key, if the last attempt allowed it (Receipt.Resend, or a PENDING orphan),
//     the key is still retained (receipt age plus timeout below keyRetention)
//     and fewer than maxAttempts sends were made; its answer is classified as
//     the first one was. Otherwise the receipt stays UNKNOWN for an operator.
//   - lookup: see Lookup.
//   - manual: nothing; an operator resolves it.
func (a *API) Resolve(ctx context.Context, r fencegate.Receipt) (fencegate.Outcome, error) {
	st := a.settleFor(r)
	switch st.Strategy {
	case StrategyResend, StrategyConflictFetch:
		return a.resend(ctx, r, st)
	case StrategyLookup:
		return a.lookup(ctx, r, st.Lookup)
	}
	return fencegate.Outcome{State: fencegate.ReceiptUnknown}, fencegate.Errorf(fencegate.CodeUnsupported,
		"api %q settles unknown outcomes by hand; an operator must resolve %s", a.cfg.Name, r.ID)
}

// spent reports whether no resend of r may be made under st whatever its
// last answer said: it keeps no request, its key is past retention (with
// the send timeout to spare), or its attempts are used up.
func (a *API) spent(r fencegate.Receipt, st Settle) bool {
	return r.Request == nil || a.now().Sub(r.CreatedAt)+a.cfg.Timeout >= st.retention(a.cfg.Contract) ||
		r.Attempts >= st.MaxAttempts
}

// WillResend reports whether Resolve would send r upstream again now
// (gateway.Resender): its route resends, and a resend is allowed and due
// (for a PENDING receipt, an orphan the reconciler resends: it keeps its
// request, within the key's retention and the attempts).
func (a *API) WillResend(r fencegate.Receipt) bool {
	st := a.settleFor(r)
	if st.Strategy != StrategyResend && st.Strategy != StrategyConflictFetch {
		return false
	}
	if r.State == fencegate.ReceiptPending { // an orphan: resent as resend does, unless it would give up
		return !a.spent(r, st)
	}
	return r.State == fencegate.ReceiptUnknown && !a.GaveUp(r) && (r.RetryAt == nil || !a.now().Before(*r.RetryAt))
}

// MayBeSending implements gateway.Resender: r's last settle (SettledAt, a
// resend's claim) allowed a resend, and an attempt begun then may still be
// running: within the send timeout, twice it where a conflict answer is
// followed by a fetch of its own timeout (StrategyConflictFetch), and the
// clock skew between replicas beside it (another replica may have claimed).
func (a *API) MayBeSending(r fencegate.Receipt) bool {
	st := a.settleFor(r)
	if st.Strategy != StrategyResend && st.Strategy != StrategyConflictFetch {
		return false
	}
	if r.SettledAt == nil || r.Request == nil || !r.Resend || r.Attempts >= st.MaxAttempts {
		return false
	}
	at := *r.SettledAt
	open := a.cfg.Timeout
	if st.Strategy == StrategyConflictFetch {
		open *= 2
	}
	return at.Sub(r.CreatedAt)+a.cfg.Timeout < st.retention(a.cfg.Contract) && a.now().Sub(at) < open+fencegate.MaxClockSkew
}

// GaveUp reports whether Resolve will not settle the UNKNOWN receipt r any
// more, so it waits for an operator (gateway.GiverUp): the route settles by
// hand, or it resends and no resend is allowed (no kept request, an answer
// that forbids it, the key past retention, maxAttempts sent). A lookup keeps
// asking until the reconcile deadline.
func (a *API) GaveUp(r fencegate.Receipt) bool {
	if r.State != fencegate.ReceiptUnknown {
		return false
	}
	st := a.settleFor(r)
	switch st.Strategy {
	case StrategyResend, StrategyConflictFetch:
		return !r.Resend || a.spent(r, st)
	case StrategyLookup:
		return false
	}
	return true
}

func (a *API) resend(ctx context.Context, r fencegate.Receipt, st Settle) (fencegate.Outcome, error) {
	still := fencegate.Outcome{State: fencegate.ReceiptUnknown, Resend: r.Resend, Error: r.Error}
	manual := func(why string) (fencegate.Outcome, error) {
		if r.State == fencegate.ReceiptUnknown && !r.Resend {
			return still, nil // already waiting for a person
		}
		return fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: why + "; it needs manual reconciliation"}, nil
	}
	switch {
	case r.Request == nil:
		return manual("the receipt keeps no request to resend")
	case r.State == fencegate.ReceiptUnknown && !r.Resend:
		return still, nil // the last answer does not allow a resend
	case a.now().Sub(r.CreatedAt)+a.cfg.Timeout >= st.retention(a.cfg.Contract):
		return manual(fmt.Sprintf("past the key retention of %s with no proof", st.retention(a.cfg.Contract)))
	case r.Attempts >= st.MaxAttempts:
		return manual(fmt.Sprintf("%d sends without a final answer", r.Attempts))
	case r.State == fencegate.ReceiptUnknown && r.RetryAt != nil && a.now().Before(*r.RetryAt):
		// The last answer was "in progress, retry later" with a Retry-After
		// (DESIGN §4): no send under the key before it, whoever asks (a
		// replay, the reconciler, another replica).
		return still, nil
	}
	reason := "unknown"
	if r.State == fencegate.ReceiptPending || r.Attempts == 0 {
		reason = "orphaned" // never recorded as sent: a PENDING orphan (claimed UNKNOWN first)
	}
	a.resends.Add(1)
	if a.onResend != nil {
		a.onResend(a.cfg.Name, reason)
	}
	a.log.Info("resending an upstream request under its idempotency key", "api", a.cfg.Name, "receipt", r.ID,
		"attempt", r.Attempts+1, "reason", reason, "last", r.Error)
	out, _ := a.attempt(ctx, r, r.Request, false)
	return out, nil
}

// lookup asks the declared query and matches its answer.
func (a *API) lookup(ctx context.Context, r fencegate.Receipt, l *Lookup) (fencegate.Outcome, error) {
	still := fencegate.Outcome{State: fencegate.ReceiptUnknown, Resend: r.Resend, Error: r.Error}
	want, ref, err := a.lookupValue(r, l)
	if err != nil {
		return still, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	target, err := a.templateURL(l.URL, "{key}", want, "{ref}", ref)
	if fencegate.ErrorCode(err) == fencegate.CodeUnsupported {
		return still, err // a value no URL can carry: a person decides
	}
	if err != nil {
		return still, fencegate.Wrap(err, fencegate.CodeInternal, "cannot build the lookup")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, http.NoBody)
	if err != nil {
		return still, fencegate.Wrap(err, fencegate.CodeInternal, "cannot build the lookup")
	}
	req.Header = a.queryHeader(r.Request)
	resp, err := a.client.Do(req)
	if err != nil {
		return still, fencegate.Wrap(err, fencegate.CodeBackendUnavailable, fmt.Sprintf("api %q: lookup failed", a.cfg.Name))
	}
	defer resp.Body.Close()
	notFound := func(why string) (fencegate.Outcome, error) {
		minAge := l.MinAge
		if minAge == 0 {
			minAge = a.cfg.Timeout
		}
		if a.now().Sub(a.lastSendBound(r)) < minAge {
			return still, nil // a late request may still land, or the search may lag
		}
		return fencegate.Outcome{State: fencegate.ReceiptNotApplied, Error: fmt.Sprintf("the lookup found no effect for %q (%s)", want, why)}, nil
	}
	switch {
	case resp.StatusCode == http.StatusNotFound && l.List == "":
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, a.cfg.MaxResponseBytes))
		return notFound("404")
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, a.cfg.MaxResponseBytes))
		return still, fencegate.Errorf(fencegate.CodeBackendUnavailable, "api %q: lookup answered %s", a.cfg.Name, resp.Status)
	}
	er, err := a.readAnswer(resp)
	if err != nil || er.Header[TruncatedHeader] != "" {
		return still, fencegate.Errorf(fencegate.CodeBackendUnavailable, "api %q: lookup answer broke off or is over maxResponseBytes", a.cfg.Name)
	}
	doc, err := decodeJSON(er.Body)
	if err != nil {
		return still, fencegate.Errorf(fencegate.CodeBackendUnavailable, "api %q: lookup answer is not JSON", a.cfg.Name)
	}
	candidates := []any{doc}
	if l.List != "" {
		toks, _ := parsePointer(l.List)
		v, ok := lookupPointer(doc, toks)
		list, isList := v.([]any)
		if !ok || !isList {
			return still, fencegate.Errorf(fencegate.CodeBackendUnavailable, "api %q: lookup answer has no list at %s", a.cfg.Name, l.List)
		}
		candidates = list
	}
	field, _ := parsePointer(l.Field)
	unread := false // a candidate the rule cannot read
	for _, c := range candidates {
		v, ok := lookupPointer(c, field)
		s, isScalar := scalarText(v)
		if !ok || !isScalar {
			unread = true
			continue
		}
		if s == want {
			if same, ok := a.sameSegment(c, l, r); !ok {
				return still, fencegate.Errorf(fencegate.CodeBackendUnavailable, "api %q: lookup candidate has no fence or segment at %s, %s", a.cfg.Name, l.Fence, l.Segment)
			} else if !same {
				continue // another segment's effect under the same reference
			}
			body, _ := json.Marshal(c)
			return fencegate.Outcome{State: fencegate.ReceiptCommitted, Response: &fencegate.EffectResponse{
				Status: l.Status, Body: body,
				Header: map[string]string{"Content-Type": "application/json", SettledByHeader: StrategyLookup},
			}}, nil
		}
	}
	if unread {
		// A candidate without the field is not read as the rule expects
		// (an error envelope under 200, a proxy's page, a list in another
		// API version's shape, an effect made without a key): the answer
		// proves no absence.
		return still, fencegate.Errorf(fencegate.CodeBackendUnavailable, "api %q: lookup answer has a candidate without %s", a.cfg.Name, l.Field)
	}
	if l.More != "" {
		toks, _ := parsePointer(l.More)
		if more, ok := lookupPointer(doc, toks); !ok || more != false {
			return still, fencegate.Errorf(fencegate.CodeBackendUnavailable, "api %q: lookup answer says more results follow (%s), none of these matching", a.cfg.Name, l.More)
		}
	}
	return notFound(fmt.Sprintf("%d candidates, none matching", len(candidates)))
}

// queryHeader is the header of a GET that asks about kr's effect (a lookup,
// a conflict fetch): the worker's forwarded headers kr was sent with, since
// they scope what the upstream answers (Stripe-Account picks the connected
// account, https://docs.stripe.com/connect/authentication; GoCardless
// refuses a request without GoCardless-Version,
// https://developer.gocardless.com/api-reference/#making-requests-versioning),
// less the body's Content-Type and the gateway's own headers (the key,
// native fence headers), plus the credential.
func (a *API) queryHeader(kr *fencegate.EffectRequest) http.Header {
	h := http.Header{}
	if kr != nil {
		for k, v := range kr.Header {
			h[k] = slices.Clone(v)
		}
	}
	h.Del("Content-Type")
	for _, name := range a.ownHeaders() {
		h.Del(name)
	}
	return a.withCredential(h)
}

// sameSegment reports whether candidate c was made under r's fence and
// segment, as read at the lookup's Fence and Segment pointers (true when
// none is declared); ok is false when a declared one is missing.
func (a *API) sameSegment(c any, l *Lookup, r fencegate.Receipt) (same, ok bool) {
	same = true
	for _, f := range []struct {
		ptr  string
		want uint64
	}{{l.Fence, r.FenceToken}, {l.Segment, r.Segment}} {
		if f.ptr == "" {
			continue
		}
		toks, _ := parsePointer(f.ptr)
		v, found := lookupPointer(c, toks)
		s, isScalar := scalarText(v)
		if !found || !isScalar {
			return false, false
		}
		same = same && s == strconv.FormatUint(f.want, 10)
	}
	return same, true
}

// lastSendBound is the latest moment a send of r may still have been open
// on the gateway's side, from what is known durably: minAge counts from it,
// never from the receipt's creation, since a send that started late (a slow
// admission, a resend) can still land after creation+minAge, and a lookup
// calling it NOT_APPLIED would then deny an effect that happened (a payment
// made twice after a retry under a new key). It is the latest of:
//
//   - the receipt's effect expiry (its LandBy, the admitting gateway's
//     creation plus effect timeout; for a receipt without one, creation
//     plus this gateway's): the first send starts, and its context ends,
//     by then;
//   - the last settle recorded on the receipt (SettledAt): a resend is
//     recorded after its exchange ended;
//   - this process's start, for a receipt older than it: a previous process
//     may have resent it and died before recording that.
//
// Sends are made only by the gateway that admitted a receipt and by the
// reconciler's resends, which a lookup route never makes; a resend in
// flight on another replica under another strategy for the same route (a
// config change rolled out to some replicas only) is not covered.
func (a *API) lastSendBound(r fencegate.Receipt) time.Time {
	at := r.Expiry(a.effectTTL)
	if r.SettledAt != nil && r.SettledAt.After(at) {
		at = *r.SettledAt
	}
	if r.CreatedAt.Before(a.started) && a.started.After(at) {
		at = a.started
	}
	return at
}

// lookupValue is what a candidate's field must equal (the key, or the ref
// read from the kept request) and the ref for {ref}.
func (a *API) lookupValue(r fencegate.Receipt, l *Lookup) (want, ref string, err error) {
	// Only what was sent counts: a key recomputed now could differ from the
	// one sent (another key shape since), and "not found" would then be a lie.
	if r.Request == nil {
		return "", "", fencegate.Errorf(fencegate.CodeUnsupported, "receipt %s keeps no request to look up; an operator must resolve it", r.ID)
	}
	if l.Ref == "" {
		if r.Request.Key == "" {
			return "", "", fencegate.Errorf(fencegate.CodeUnsupported, "receipt %s was sent no key to look up", r.ID)
		}
		return r.Request.Key, "", nil
	}
	if name, ok := strings.CutPrefix(l.Ref, "form:"); ok {
		q, perr := url.ParseQuery(string(r.Request.Body))
		ref = q.Get(name)
		if perr != nil || ref == "" {
			return "", "", fencegate.Errorf(fencegate.CodeUnsupported, "receipt %s: the kept body has no form field %s", r.ID, name)
		}
		if len(q[name]) > 1 {
			// Servers differ on which one counts (Rack and PHP keep the
			// last, Go the first): a lookup of either could miss the
			// effect the upstream made under the other.
			return "", "", fencegate.Errorf(fencegate.CodeUnsupported, "receipt %s: the kept body gives the form field %s %d times; an operator must resolve it", r.ID, name, len(q[name]))
		}
		return ref, ref, nil
	}
	doc, derr := decodeJSON(r.Request.Body)
	toks, _ := parsePointer(l.Ref)
	v, ok := lookupPointer(doc, toks)
	s, isScalar := scalarText(v)
	if derr != nil || !ok || !isScalar || s == "" {
		return "", "", fencegate.Errorf(fencegate.CodeUnsupported, "receipt %s: the kept body has no value at %s", r.ID, l.Ref)
	}
	return s, s, nil
}

// fetchConflict reads the existing resource's ID from a conflict answer and
// fetches it; a 2xx answer is the call's result.
func (a *API) fetchConflict(ctx context.Context, c *ConflictFetch, kr *fencegate.EffectRequest, er *fencegate.EffectResponse) fencegate.Outcome {
	again := fencegate.Outcome{State: fencegate.ReceiptUnknown, Resend: true}
	doc, err := decodeJSON(er.Body)
	toks, _ := parsePointer(c.ID)
	v, ok := lookupPointer(doc, toks)
	id, isScalar := scalarText(v)
	if err != nil || !ok || !isScalar || id == "" {
		again.Error = fmt.Sprintf("upstream answered %d: a conflict without a resource ID at %s", er.Status, c.ID)
		return again
	}
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	target, err := a.templateURL(c.URL, "{id}", id)
	if err != nil {
		again.Error = "cannot build the conflict fetch: " + err.Error()
		return again
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, http.NoBody)
	if err != nil {
		again.Error = "cannot build the conflict fetch: " + err.Error()
		return again
	}
	req.Header = a.queryHeader(kr)
	resp, err := a.client.Do(req)
	if err != nil {
		again.Error = "the conflict fetch failed: " + err.Error()
		return again
	}
	defer resp.Body.Close()
	got, err := a.readAnswer(resp)
	if err != nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
		again.Error = fmt.Sprintf("the conflict fetch of %s answered %s", id, resp.Status)
		return again
	}
	got.Header[SettledByHeader] = StrategyConflictFetch
	return fencegate.Outcome{State: fencegate.ReceiptCommitted, Response: got}
}
