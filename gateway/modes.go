package gateway

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"

	"golang.org/x/text/unicode/norm"

	"github.com/fencegate/fencegate"
)

// Mode is how the acceptance point treats a resource's refusals.
type Mode string

// Enforcement modes.
const (
	// Enforce refuses what fails verification or the fence rules.
	Enforce Mode = "enforce"
	// Shadow verifies and records the verdict but forwards refused requests
	// anyway; it exists for rollout, never as a way back from Enforce.
	Shadow Mode = "shadow"
)

// ModeRule applies Mode to resources matching Pattern (path.Match syntax,
// matched against the resource and each of its ancestors).
type ModeRule struct {
	Pattern string `json:"pattern" yaml:"pattern"`
	Mode    Mode   `json:"mode" yaml:"mode"`
}

// Modes holds the enforcement mode per resource pattern; the longest
// matching pattern wins and a resource no pattern matches is enforced. Once a
// pattern is enforced it goes back to shadow only with break-glass: a
// rollback never switches resource-side validation off silently.
type Modes struct {
	mu    sync.RWMutex
	rules []ModeRule
	// forwarding is held for reading by every shadow forward from its mode
	// check to its effect's end (HoldShadow), and for writing by Set, so
	// that a change has waited for the forwards decided before it.
	forwarding sync.RWMutex
}

// NewModes returns Modes with the given rules (validated as by Set with break-glass).
func NewModes(rules ...ModeRule) (*Modes, error) {
	m := &Modes{}
	for _, r := range rules {
		if err := m.Set(r.Pattern, r.Mode, true); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// For returns the mode of resource.
func (m *Modes) For(resource string) Mode {
	if m == nil {
		return Enforce
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, r := range m.rules { // sorted longest pattern first
		if matches(r.Pattern, resource) {
			return r.Mode
		}
	}
	return Enforce
}

// Match returns the rule that decides resource's mode (false: none, the
// resource is enforced by default).
func (m *Modes) Match(resource string) (ModeRule, bool) {
	if m == nil {
		return ModeRule{}, false
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	for _, r := range m.rules {
		if matches(r.Pattern, resource) {
			return r, true
		}
	}
	return ModeRule{}, false
}

// matches reports whether pattern matches resource or one of its ancestors,
// so "local/*" covers local/inv and everything under it.
func matches(pattern, resource string) bool {
	for r := resource; r != ""; {
		if ok, _ := path.Match(pattern, r); ok {
			return true
		}
		i := strings.LastIndexByte(r, '/')
		if i < 0 {
			break
		}
		r = r[:i]
	}
	return false
}

// HoldShadow reports whether resource is in shadow mode and, if it is,
// keeps it so for the caller (a shadow forward) until release: Set waits
// for every hold, so once a change to enforce has returned no write it
// refuses is still being forwarded. A caller holds at most one at a time.
func (m *Modes) HoldShadow(resource string) (release func(), ok bool) {
	if m == nil {
		return nil, false
	}
	m.forwarding.RLock()
	if m.For(resource) != Shadow {
		m.forwarding.RUnlock()
		return nil, false
	}
	return m.forwarding.RUnlock, true
}

// ValidMode reports whether mode is enforce or shadow.
func ValidMode(mode Mode) bool { return mode == Enforce || mode == Shadow }

// Set sets pattern's mode. Moving a pattern that resolves to enforce (by an
// existing rule or the default) to shadow needs breakGlass. It returns once
// every shadow forward decided before it has ended (HoldShadow), at most
// an effect timeout.
func (m *Modes) Set(pattern string, mode Mode, breakGlass bool) error {
	if !ValidMode(mode) {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "mode must be enforce or shadow, not %q", mode)
	}
	if _, err := path.Match(pattern, ""); err != nil || pattern == "" {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "bad resource pattern %q", pattern)
	}
	if err := fencegate.CheckName(norm.NFC.String(patternExample(pattern))); err != nil {
		// A rule no resource can match (a trailing or doubled slash, say)
		// would be taken and do nothing: an enforce meant to end a rollout
		// that leaves it shadow.
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "resource pattern %q matches no resource name: %s", pattern, fencegate.ErrorMessage(err))
	}
	m.forwarding.Lock()
	defer m.forwarding.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	idx := -1
	for i, r := range m.rules {
		if r.Pattern == pattern {
			idx = i
		}
	}
	if mode == Shadow && !breakGlass && (idx < 0 || m.rules[idx].Mode == Enforce) {
		return fencegate.Errorf(fencegate.CodeForbidden, "pattern %q is enforced; going back to shadow needs the break-glass flag", pattern)
	}
	if idx >= 0 {
		m.rules[idx].Mode = mode
		sortRules(m.rules)
		return nil
	}
	m.rules = append(m.rules, ModeRule{Pattern: pattern, Mode: mode})
	sortRules(m.rules)
	return nil
}

// sortRules orders rules as For tries them: longest pattern first; of
// equally long ones enforce first, then by pattern. The order never depends
// on the order rules were set in, so reordering the same rules (a restart)
// never moves a resource from enforce to shadow.
func sortRules(rules []ModeRule) {
	sort.Slice(rules, func(i, j int) bool {
		a, b := rules[i], rules[j]
		if len(a.Pattern) != len(b.Pattern) {
			return len(a.Pattern) > len(b.Pattern)
		}
		if a.Mode != b.Mode {
			return a.Mode == Enforce
		}
		return a.Pattern < b.Pattern
	})
}

// Rules returns the rules, longest pattern first.
func (m *Modes) Rules() []ModeRule {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return append([]ModeRule(nil), m.rules...)
}

// Downgrade is one change that switches resource-side validation off: a
// pattern that was enforced (or is new, so its resources were enforced by the
// default) going to shadow, or an enforce rule going away (To is "").
type Downgrade struct {
	Pattern string
	From    Mode
	To      Mode
}

// Downgrades lists the changes from the rules before to the rules after that
// need break-glass, by the same rule as Set: a pattern whose rule becomes
// shadow while it was enforce or absent, and an enforce rule that is removed.
// Patterns are listed in order.
func Downgrades(before, after []ModeRule) []Downgrade {
	was := map[string]Mode{}
	for _, r := range before {
		was[r.Pattern] = r.Mode
	}
	now := map[string]Mode{}
	for _, r := range after {
		now[r.Pattern] = r.Mode
	}
	var out []Downgrade
	for p, m := range now {
		if m == Shadow && was[p] != Shadow {
			from := was[p]
			if from == "" {
				from = Enforce // the default for a pattern no rule names
			}
			out = append(out, Downgrade{Pattern: p, From: from, To: Shadow})
		}
	}
	for p, m := range was {
		if _, kept := now[p]; m == Enforce && !kept {
			out = append(out, Downgrade{Pattern: p, From: Enforce})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pattern < out[j].Pattern })
	return out
}

// String says what the downgrade does, for logs and refusals.
func (d Downgrade) String() string {
	if d.To == "" {
		return fmt.Sprintf("the enforce rule for %q is removed", d.Pattern)
	}
	return fmt.Sprintf("%q goes from %s to %s", d.Pattern, d.From, d.To)
}

// patternExample is a name pattern matches if it matches any (path.Match
// syntax, already checked): each wildcard or character class replaced by
// "x", each escape by the character it escapes. CheckName refuses it
// exactly when no resource name can match: what it refuses (empty, "." or
// ".." segments, a leading or trailing slash, '\\', '%', control
// characters) is in the pattern's literal text.
func patternExample(pattern string) string {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '*', '?':
			b.WriteByte('x')
		case '[':
			j := i + 1
			for j < len(pattern) && pattern[j] != ']' {
				if pattern[j] == '\\' {
					j++
				}
				j++
			}
			b.WriteByte('x')
			i = j
		case '\\':
			if i+1 < len(pattern) {
				i++
				b.WriteByte(pattern[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
