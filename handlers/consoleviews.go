package handlers

import (
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs"
)

func (s *Server) consoleQuarantineList(w http.ResponseWriter, r *http.Request) {
	q, page, err := listQuery(r)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	res := q.Get("resource")
	list, err := s.Gateway.Store().Quarantined(r.Context(), res, page)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	data := map[string]any{"Resource": res, "Records": list.Records}
	if list.Next != "" {
		data["Next"] = nextQuery(url.Values{"resource": {res}, "cursor": {list.Next}})
	}
	s.render(w, r, http.StatusOK, "quarantinelist", data)
}

// shownPayload is a payload as the console shows it: text when it is UTF-8,
// else its first bytes in hex.
type shownPayload struct {
	Kept  bool
	Text  string
	Hex   string
	Size  int
	Note  string
	Whole bool
}

// maxShownPayload bounds what a page shows of a payload.
const maxShownPayload = 64 << 10

func showPayload(b []byte, kept bool, note string) shownPayload {
	p := shownPayload{Kept: kept, Size: len(b), Note: note, Whole: len(b) <= maxShownPayload}
	if !kept {
		return p
	}
	if len(b) > maxShownPayload {
		b = b[:maxShownPayload]
	}
	if utf8.Valid(b) {
		p.Text = string(b)
	} else {
		const hexdigits = "0123456789abcdef"
		n := min(len(b), 4096)
		out := make([]byte, 0, 3*n)
		for _, c := range b[:n] {
			out = append(out, hexdigits[c>>4], hexdigits[c&15], ' ')
		}
		p.Hex = string(out)
	}
	return p
}

// consoleQuarantine shows a quarantine record with the refused payload and
// the accepted one side by side.
func (s *Server) consoleQuarantine(w http.ResponseWriter, r *http.Request) {
	v, err := s.quarantineView(r, chi.URLParam(r, "id"), false)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	note := ""
	if !v.Quarantine.PayloadKept {
		note = "the refused payload was larger than the quarantine bound: only its digest and size are kept"
	}
	s.render(w, r, http.StatusOK, "quarantine", map[string]any{"Q": v.Quarantine, "Accepted": v.Accepted,
		"Refused":         showPayload(v.Quarantine.Payload, v.Quarantine.PayloadKept, note),
		"AcceptedPayload": showPayload(v.AcceptedPayload, v.AcceptedPayloadKept, v.AcceptedPayloadNote)})
}

// shadowGroup is the shadow verdicts of one mode pattern.
type shadowGroup struct {
	Pattern string
	Mode    gateway.Mode
	ByCode  map[fencegate.Code]int
	Latest  []gateway.Refusal
	Total   int
}

// consoleShadow shows the verdicts shadow mode recorded (and forwarded), by
// the pattern that put their resource in shadow mode.
func (s *Server) consoleShadow(w http.ResponseWriter, r *http.Request) {
	by := map[string]*shadowGroup{}
	var patterns []string
	for _, v := range s.Gateway.Refusals().Shadowed() {
		pat, mode := "(no rule now)", gateway.Enforce
		if rule, ok := s.Gateway.Modes().Match(v.Resource); ok {
			pat, mode = rule.Pattern, rule.Mode
		}
		g, ok := by[pat]
		if !ok {
			g = &shadowGroup{Pattern: pat, Mode: mode, ByCode: map[fencegate.Code]int{}}
			by[pat] = g
			patterns = append(patterns, pat)
		}
		g.Total++
		g.ByCode[v.Code]++
		if len(g.Latest) < 20 {
			g.Latest = append(g.Latest, v)
		}
	}
	slices.Sort(patterns)
	groups := make([]*shadowGroup, 0, len(patterns))
	for _, p := range patterns {
		groups = append(groups, by[p])
	}
	s.render(w, r, http.StatusOK, "shadow", map[string]any{"Groups": groups})
}

func (s *Server) consoleModes(w http.ResponseWriter, r *http.Request) {
	var rules []gateway.ModeRule
	if m := s.Gateway.Modes(); m != nil {
		rules = m.Rules()
	}
	slices.SortFunc(rules, func(a, b gateway.ModeRule) int {
		if a.Pattern < b.Pattern {
			return -1
		}
		if a.Pattern > b.Pattern {
			return 1
		}
		return 0
	})
	done, ok := strings.CutPrefix(s.takeFlash(r), "mode ")
	if !ok {
		done = ""
	}
	s.render(w, r, http.StatusOK, "modes", map[string]any{"Rules": rules, "CanSet": s.Admin != nil, "Done": done})
}

// bundleKeyRow is one key of the trust bundle as the console lists it.
type bundleKeyRow struct {
	KeyID     string
	Alg       string
	Epoch     uint64
	NotBefore time.Time
	NotAfter  time.Time
	Current   bool
}

// consoleTrust shows the operator state: trust bundle version and keys,
// issuer epochs (current and revoked), policy generation and issuance.
func (s *Server) consoleTrust(w http.ResponseWriter, r *http.Request) {
	if s.Admin == nil {
		s.consoleError(w, r, fencegate.Errorf(fencegate.CodeNotFound, "this gateway has no operator state"))
		return
	}
	st, err := s.Admin.State(r.Context())
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	raw, err := s.Admin.TrustBundle(r.Context())
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	b, err := proofs.ParseBundle(raw)
	if err != nil {
		s.consoleError(w, r, err)
		return
	}
	var keys []bundleKeyRow
	for _, k := range b.Keys() {
		kid := k.Key.KeyID()
		keys = append(keys, bundleKeyRow{KeyID: kid, Alg: k.Alg.String(), Epoch: k.Epoch, NotBefore: k.NotBefore,
			NotAfter: k.NotAfter, Current: st.IssuerEpoch != 0 && k.Epoch == st.IssuerEpoch})
	}
	s.render(w, r, http.StatusOK, "trust", map[string]any{"S": st, "Keys": keys, "BundleVersion": b.Version(),
		"Revoked": b.Revocations()})
}

// nextQuery is the query string of a page's "more" link, trusted as a URL
// part: html/template would otherwise escape its "=" and "&" (a string in
// a URL's query is one query value), so the link would carry no cursor.
// url.Values.Encode leaves nothing in it but escaped values and separators.
func nextQuery(v url.Values) template.URL { return template.URL(v.Encode()) }
