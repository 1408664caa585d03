package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate"
)

// Match selects upstream answers: every condition given must hold.
type Match struct {
	// Status is an exact status ("409") or a class ("5xx").
	Status string `yaml:"status"`
	// Header is "Name: value": the answer carries that header with that
	// value (compared case-insensitively), e.g. "Stripe-Should-Retry: true".
	Header string `yaml:"header"`
	// Field is a JSON pointer into the answer's body whose scalar value must
	// be Equals, e.g. /error/code = idempotency_key_in_use.
	Field  string `yaml:"field"`
	Equals string `yaml:"equals"`
}

// Answers classifies an API's answers to a fenced call. A declared class
// replaces that class's default; classes are tried in the order below, and
// an answer no class matches is a refusal when it is a redirect (3xx but
// 301, 302 and 303), 401, 403, 407 or 408, unknown when it is 301, 302, 303
// or from 500 on, and final otherwise.
//
// A refusal is the upstream (or a front end or proxy before it) turning the
// request away before it ran: 401, the request lacked valid credentials;
// 403, the server refused to fulfil it; 407, the same for a proxy on the
// way; 408, the server did not receive the whole request in time (RFC 9110
// §15.5.2, §15.5.4, §15.5.8, §15.5.9); a redirect, which the gateway never
// follows, says the user agent must take further action to fulfil the
// request (RFC 9110 §15.4): the gateway's own credential, permissions or
// base URL, or a slow send. Nothing ran, and Stripe saves no result for a
// request that never started executing
// (https://docs.stripe.com/api/idempotent_requests). On a first send the
// receipt is FAILED (the segment may be sent again once the cause is
// mended), never a stored answer a replay repeats forever; on a resend it
// says nothing of the first attempt, so the receipt stays UNKNOWN and is
// resent later. A 301, 302 or 303 is not a refusal: it may point at the
// result of an action the server performed (RFC 9110 §15.4.4, the
// POST/redirect/GET pattern, which many frameworks answer with 302, and
// §15.4.2-3: user agents historically follow a 301 or 302 to a POST with a
// GET), so it is unknown and not resent. A 307 or 308 asks for the same
// request again elsewhere, method and body unchanged (§15.4.8-9): nothing
// ran here.
//
// Defaults follow draft-ietf-httpapi-idempotency-key-header (its error handling: 409 while
// the first request with the key is still being processed) and what every
// listed API documents for a request that got no answer: resend it with the
// same key (Stripe, Adyen, PayPal, Square, GoCardless, Checkout.com).
type Answers struct {
	// InProgress: an earlier request with the key is still being processed;
	// retried later under the same key, never stored. Default: 409.
	InProgress []Match `yaml:"inProgress"`
	// Resend: nothing final was decided and a same-key resend is safe.
	// Default: 429, 502, 503, 504 (a rate limit, or an intermediary that
	// got no answer either: the same as a timeout).
	Resend []Match `yaml:"resend"`
	// Unknown: the outcome is open and a resend would not settle it (Stripe
	// saves 500 answers and replays them). Default: none (5xx not matched
	// above are unknown anyway).
	Unknown []Match `yaml:"unknown"`
	// Final: the answer is the call's result and is stored (COMMITTED with
	// it). Default: none (answers below 500 not matched above are final,
	// but the refusals, 301, 302 and 303).
	Final []Match `yaml:"final"`
}

// answerClass is what an upstream answer means for the receipt.
type answerClass int

const (
	classFinal answerClass = iota
	classInProgress
	classResend
	classUnknown
	classRefused
)

func (c answerClass) String() string {
	return [...]string{"final", "in-progress", "resend", "unknown", "refused"}[c]
}

var defaultAnswers = Answers{
	InProgress: []Match{{Status: "409"}},
	Resend:     []Match{{Status: "429"}, {Status: "502"}, {Status: "503"}, {Status: "504"}},
}

// withDefaults applies the defaults of an idempotency contract; an API
// without a key (native fence only) has no in-progress or resend defaults:
// without a key, no answer makes a resend safe.
func (a Answers) withDefaults(c Contract) Answers {
	if c.Idempotency == nil {
		return a
	}
	if a.InProgress == nil {
		a.InProgress = defaultAnswers.InProgress
	}
	if a.Resend == nil {
		a.Resend = defaultAnswers.Resend
	}
	return a
}

func (a Answers) validate() []string {
	var errs []string
	for name, ms := range map[string][]Match{"inProgress": a.InProgress, "resend": a.Resend, "unknown": a.Unknown, "final": a.Final} {
		for i, m := range ms {
			if err := m.validate(); err != nil {
				errs = append(errs, fmt.Sprintf("answers.%s[%d]: %s", name, i, err))
			}
		}
	}
	return errs
}

func (m Match) validate() error {
	if m.Status == "" && m.Header == "" && m.Field == "" {
		return fmt.Errorf("a match needs status, header or field")
	}
	if m.Status != "" {
		if _, _, err := statusRange(m.Status); err != nil {
			return err
		}
	}
	if m.Header != "" {
		name, _, ok := strings.Cut(m.Header, ":")
		if !ok || !validHeaderName(strings.TrimSpace(name)) {
			return fmt.Errorf("header %q must be \"Name: value\"", m.Header)
		}
	}
	if m.Field != "" {
		if _, err := parsePointer(m.Field); err != nil {
			return fmt.Errorf("field %q: %w", m.Field, err)
		}
	} else if m.Equals != "" {
		return fmt.Errorf("equals needs a field")
	}
	return nil
}

// statusRange parses "409" or "5xx".
func statusRange(s string) (lo, hi int, err error) {
	if len(s) == 3 && s[1:] == "xx" && s[0] >= '1' && s[0] <= '5' {
		lo = int(s[0]-'0') * 100
		return lo, lo + 99, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 100 || n > 599 {
		return 0, 0, fmt.Errorf("status %q must be a code (409) or a class (5xx)", s)
	}
	return n, n, nil
}

// answer is an upstream answer as the classifier sees it.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (m Match) matches(a *answer) bool {
	if m.Status != "" {
		lo, hi, _ := statusRange(m.Status)
		if a.status < lo || a.status > hi {
			return false
		}
	}
	if m.Header != "" {
		name, want, _ := strings.Cut(m.Header, ":")
		got := a.header.Values(strings.TrimSpace(name))
		found := false
		for _, g := range got {
			found = found || strings.EqualFold(strings.TrimSpace(g), strings.TrimSpace(want))
		}
		if !found {
			return false
		}
	}
	if m.Field != "" {
		doc, err := decodeJSON(a.body)
		if err != nil {
			return false
		}
		toks, _ := parsePointer(m.Field)
		v, ok := lookupPointer(doc, toks)
		if !ok {
			return false
		}
		if s, ok := scalarText(v); !ok || s != m.Equals {
			return false
		}
	}
	return true
}

func anyMatch(ms []Match, a *answer) bool {
	for _, m := range ms {
		if m.matches(a) {
			return true
		}
	}
	return false
}

// classify applies the answer classes (defaults applied) to a.
func (as Answers) classify(a *answer) answerClass {
	switch {
	case anyMatch(as.InProgress, a):
		return classInProgress
	case anyMatch(as.Resend, a):
		return classResend
	case anyMatch(as.Unknown, a):
		return classUnknown
	case anyMatch(as.Final, a):
		return classFinal
	case notPerformed(a.status):
		return classRefused
	case mayHaveRun(a.status), a.status >= 500:
		return classUnknown
	}
	return classFinal
}

// notPerformed reports whether an answer of the status no class matches
// says the request was turned away before it ran: a refusal (see Answers).
func notPerformed(status int) bool {
	switch status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusProxyAuthRequired, http.StatusRequestTimeout:
		return true
	}
	return status >= 300 && status < 400 && !mayHaveRun(status)
}

// mayHaveRun reports whether a redirect may follow an action the server
// performed (301, 302, 303: see Answers).
func mayHaveRun(status int) bool {
	return status == http.StatusMovedPermanently || status == http.StatusFound || status == http.StatusSeeOther
}

// outcomeOf is the receipt outcome of a classified answer (er the kept
// answer for a final one). resendable is false for APIs without a key.
func outcomeOf(c answerClass, er *fencegate.EffectResponse, resendable bool) fencegate.Outcome {
	if c == classFinal {
		return fencegate.Outcome{State: fencegate.ReceiptCommitted, Response: er}
	}
	msg := fmt.Sprintf("upstream answered %d (%s)", er.Status, c)
	return fencegate.Outcome{State: fencegate.ReceiptUnknown, Error: msg,
		Resend: resendable && (c == classInProgress || c == classResend || c == classRefused)}
}
