package gateway

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
)

// Refusal is one fenced write this gateway refused, or one refusal that
// shadow mode recorded and forwarded anyway (Shadow).
type Refusal struct {
	At time.Time `json:"at"`
	// Resource is the grant's resource (whose fence state decided), or the
	// target's resource when the grant itself was refused.
	Resource string `json:"resource"`
	Target   string `json:"target"`
	// Caller is the authenticated identity that sent the write; Owner,
	// Lease and FenceToken are the grant's ("" and 0 when it did not verify).
	Caller     string         `json:"caller"`
	Owner      string         `json:"owner,omitempty"`
	Lease      string         `json:"lease,omitempty"`
	FenceToken uint64         `json:"fenceToken,omitempty"`
	Segment    uint64         `json:"segment"`
	Code       fencegate.Code `json:"code"`
	Detail     string         `json:"detail,omitempty"`
	// Shadow: the resource was in shadow mode and the write was forwarded.
	Shadow bool `json:"shadow,omitempty"`
}

// DefaultJournalSize is how many refusals a Journal keeps unless told.
const DefaultJournalSize = 4096

// maxJournalText bounds each text field of a kept refusal.
const maxJournalText = 512

// Journal is the bounded in-memory record of recent refusals of one gateway
// process: the console shows them on a resource's fence timeline and, for
// shadow mode, by pattern. It is not a store of state: it is lost at restart,
// each replica keeps its own, and nothing is written for a refusal (a
// refused request changes no stored state, DESIGN §3).
//
// It holds at most its size. When full, the entry evicted is the oldest of
// the caller that holds the most entries: a client flooding refusals evicts
// its own, never another caller's, while it holds more than they do.
// Refusals are only recorded when the grant verifies (an authentic grant
// for a resource the caller was let lease) or shadow mode forwarded the
// write (past the access policy), so unauthenticated noise records nothing.
type Journal struct {
	mu         sync.Mutex
	size       int
	n          int
	byCaller   map[string][]*Refusal // oldest first
	byResource map[string][]*Refusal // oldest first
}

// NewJournal returns a Journal keeping at most size refusals (size <= 0:
// DefaultJournalSize).
func NewJournal(size int) *Journal {
	if size <= 0 {
		size = DefaultJournalSize
	}
	return &Journal{size: size, byCaller: map[string][]*Refusal{}, byResource: map[string][]*Refusal{}}
}

// Record keeps r, evicting as described on Journal when full.
func (j *Journal) Record(r Refusal) {
	// Names are kept whole up to the longest a name may be: they are the
	// index (Of), and two resources sharing their first maxJournalText
	// bytes must not be filed as one.
	for _, s := range []*string{&r.Resource, &r.Target} {
		*s = clipTo(*s, fencegate.MaxNameLength)
	}
	for _, s := range []*string{&r.Caller, &r.Owner, &r.Lease, &r.Detail} {
		*s = clip(*s)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	e := &r
	j.byCaller[r.Caller] = append(j.byCaller[r.Caller], e)
	j.byResource[r.Resource] = append(j.byResource[r.Resource], e)
	j.n++
	for j.n > j.size {
		j.evict()
	}
}

// evict drops the oldest entry of the caller holding the most (ties: the
// caller whose oldest entry is older, then by name).
func (j *Journal) evict() {
	var victim string
	for c, list := range j.byCaller {
		v := j.byCaller[victim]
		if victim == "" || len(list) > len(v) ||
			(len(list) == len(v) && (list[0].At.Before(v[0].At) || (list[0].At.Equal(v[0].At) && c < victim))) {
			victim = c
		}
	}
	list := j.byCaller[victim]
	e := list[0]
	if len(list) == 1 {
		delete(j.byCaller, victim)
	} else {
		j.byCaller[victim] = list[1:]
	}
	rl := j.byResource[e.Resource]
	if i := slices.Index(rl, e); i >= 0 {
		rl = slices.Delete(rl, i, i+1)
	}
	if len(rl) == 0 {
		delete(j.byResource, e.Resource)
	} else {
		j.byResource[e.Resource] = rl
	}
	j.n--
}

// Len is the number of refusals kept.
func (j *Journal) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.n
}

// Of returns the refusals kept for resource, newest first.
func (j *Journal) Of(resource string) []Refusal {
	j.mu.Lock()
	defer j.mu.Unlock()
	return newestFirst(j.byResource[resource], func(*Refusal) bool { return true })
}

// Shadowed returns the refusals shadow mode forwarded, newest first.
func (j *Journal) Shadowed() []Refusal {
	j.mu.Lock()
	defer j.mu.Unlock()
	var all []Refusal
	for _, list := range j.byResource {
		all = append(all, newestFirst(list, func(r *Refusal) bool { return r.Shadow })...)
	}
	slices.SortStableFunc(all, func(a, b Refusal) int { return b.At.Compare(a.At) })
	return all
}

// Resources returns the resources with kept refusals whose name contains
// substr, in byte order.
func (j *Journal) Resources(substr string) []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []string
	for res := range j.byResource {
		if strings.Contains(res, substr) {
			out = append(out, res)
		}
	}
	slices.Sort(out)
	return out
}

func newestFirst(list []*Refusal, keep func(*Refusal) bool) []Refusal {
	out := make([]Refusal, 0, len(list))
	for i := len(list) - 1; i >= 0; i-- {
		if keep(list[i]) {
			out = append(out, *list[i])
		}
	}
	return out
}

func clip(s string) string { return clipTo(s, maxJournalText) }

// clipTo is s cut to n bytes (valid UTF-8, marked with "…") when longer.
func clipTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// note records a refused or shadow-forwarded write in the journal (see
// Journal for which are kept).
func (g *Gateway) note(req Request, res Result, err error) {
	r := Refusal{At: g.cfg.Now(), Resource: req.Resource, Target: req.Target, Caller: req.Caller, Segment: req.Segment}
	switch {
	case res.Verdict != "":
		r.Code, r.Shadow, r.Detail = res.Verdict, true, res.Receipt.Error
	case err != nil && isVerdict(err):
		r.Code, r.Detail = fencegate.ErrorCode(err), fencegate.ErrorMessage(err)
	default:
		return
	}
	// A GRANT_INVALID grant did not verify: it is not verified again (a
	// flood of forged grants costs one verification each, not two).
	if r.Code != fencegate.CodeGrantInvalid {
		if vg, verr := g.cfg.Verifier.VerifyGrant(req.GrantToken); verr == nil {
			r.Resource, r.Owner, r.Lease, r.FenceToken = vg.Resource, vg.Owner, vg.Lease, vg.FenceToken
			g.journal.Record(r)
			return
		}
	}
	if r.Shadow {
		g.journal.Record(r)
	}
}

// Refusals returns the gateway's journal of recent refusals.
func (g *Gateway) Refusals() *Journal { return g.journal }
