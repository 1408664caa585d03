// Package authz is the authorization policy: which workload identities may
// lease which resources (and so renew those leases and write under them), and
// which may read what the gateway keeps about a resource (its receipts, with
// any stored upstream answers, its fence state, its objects, its quarantine
// records, and reads passed through to an API).
//
// Guarantees: a policy built by New denies everything it does not grant; a
// rule names one identity exactly, or every identity matching a SAN pattern
// (an mTLS identity is the certificate's URI SAN, or "cn:" and its subject
// CN, which no SAN pattern ever names: see CNIdentity); a resource pattern
// grants a subtree: it matches a resource when it matches the resource or one
// of its ancestors, segment-wise (path.Match, so "*" never crosses a "/");
// leasing a resource implies reading it and writing it as a delegate; a
// delegate rule lets an identity write a resource only under a delegation
// another lease's owner minted for it (it cannot lease it), and implies
// reading it. Only Open permits everything. The
// package has no I/O and imports no driver.
package authz

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/fencegate/fencegate"
)

// Rule grants one identity (Identity) or every identity matching SAN what it
// may lease (Lease: acquire, renew, write) and read (Read; Lease implies Read).
type Rule struct {
	// Identity is an exact workload identity (a bearer identity's name, or an
	// mTLS identity).
	Identity string `yaml:"identity" json:"identity,omitempty"`
	// SAN is a path.Match pattern over the identity, for mTLS identities:
	// "spiffe://acme/billing/*" matches spiffe://acme/billing/worker-1.
	// It never names a CN identity (CNIdentity): a certificate's CN is
	// free text, so a CN spelled like a URI must not pass for a URI SAN.
	SAN string `yaml:"san" json:"san,omitempty"`
	// Lease are resource patterns the identity may lease, renew and write.
	Lease []string `yaml:"lease" json:"lease,omitempty"`
	// Read are resource patterns the identity may read.
	Read []string `yaml:"read" json:"read,omitempty"`
	// Delegate are resource patterns the identity may write as the delegate
	// of another owner's lease (a signed delegation naming it), without
	// being allowed to lease them itself. Leasing implies it.
	Delegate []string `yaml:"delegate" json:"delegate,omitempty"`
}

// CNPrefix begins every identity taken from a client certificate's subject
// common name (a certificate without a URI SAN): CNIdentity.
const CNPrefix = "cn:"

// CNIdentity is the workload identity of a client certificate that has no
// URI SAN: "cn:" and its subject CN. A rule names it with identity (say
// identity: "cn:worker"); no san pattern ever names it, since a CN is free
// text in many PKIs and one spelled like a SPIFFE ID must not pass for one.
func CNIdentity(commonName string) string { return CNPrefix + commonName }

// IsCNIdentity reports whether identity is a CN identity (CNIdentity's
// form): it begins with CNPrefix, compared exactly, as every identity is
// (CNIdentity writes the prefix in lower case). No san pattern names such an
// identity, and the mTLS authenticator refuses a URI SAN for which it holds,
// so that no URI SAN passes for a CN identity; this is the one test of it.
func IsCNIdentity(identity string) bool { return strings.HasPrefix(identity, CNPrefix) }

// Policy answers who may lease and read what. The zero value and New(nil)
// deny everything. It is immutable and safe for concurrent use.
type Policy struct {
	rules []Rule
	open  bool
}

// Open is the permissive policy of `gateway dev` without rules: every
// authenticated identity may lease and read every resource.
func Open() *Policy { return &Policy{open: true} }

// New checks rules and returns the policy they grant; it reports every
// problem at once, each naming its rule.
func New(rules []Rule) (*Policy, error) {
	var errs []error
	for i, r := range rules {
		label := fmt.Sprintf("access rule %d", i+1)
		bad := func(format string, args ...any) {
			errs = append(errs, fencegate.Errorf(fencegate.CodeInvalidRequest, "%s: %s", label, fmt.Sprintf(format, args...)))
		}
		switch {
		case (r.Identity == "") == (r.SAN == ""):
			bad("needs exactly one of identity or san")
		case r.SAN != "":
			if _, err := path.Match(r.SAN, ""); err != nil {
				bad("san %q is not a valid pattern", r.SAN)
			}
		}
		if len(r.Lease) == 0 && len(r.Read) == 0 && len(r.Delegate) == 0 {
			bad("grants nothing: give lease, read or delegate patterns")
		}
		for _, p := range slices.Concat(r.Lease, r.Read, r.Delegate) {
			if err := checkPattern(p); err != nil {
				bad("resource pattern %q: %v", p, err)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Policy{rules: append([]Rule(nil), rules...)}, nil
}

// checkPattern refuses patterns that could never match a canonical resource
// or that path.Match cannot parse.
func checkPattern(p string) error {
	if p == "" {
		return errors.New("empty")
	}
	if _, err := path.Match(p, ""); err != nil {
		return err
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return errors.New(`segments must not be empty, "." or ".."`)
		}
	}
	return nil
}

// IsOpen reports whether the policy permits everything.
func (p *Policy) IsOpen() bool { return p != nil && p.open }

// MayLease reports whether identity may lease resource, renew that lease and
// write under it.
func (p *Policy) MayLease(identity, resource string) bool {
	return p.allows(identity, resource, func(r *Rule) []string { return r.Lease })
}

// MayRead reports whether identity may read resource's receipts, fence state,
// objects and quarantine records. Leasing and delegated writing imply reading.
func (p *Policy) MayRead(identity, resource string) bool {
	return p.MayLease(identity, resource) || p.allows(identity, resource, func(r *Rule) []string { return slices.Concat(r.Read, r.Delegate) })
}

// CheckLease is MayLease as an error: FORBIDDEN naming identity and resource.
func (p *Policy) CheckLease(identity, resource string) error {
	if p.MayLease(identity, resource) {
		return nil
	}
	return fencegate.Errorf(fencegate.CodeForbidden, "the access policy does not let %q lease or write %q", identity, resource)
}

// MayDelegate reports whether identity may write resource as the delegate
// of another identity's lease. Leasing implies it; it implies reading.
func (p *Policy) MayDelegate(identity, resource string) bool {
	return p.MayLease(identity, resource) || p.allows(identity, resource, func(r *Rule) []string { return r.Delegate })
}

// CheckDelegate is MayDelegate as an error: FORBIDDEN naming identity and
// resource. The registry asks it when a delegation is minted, the gateway at
// every delegated write.
func (p *Policy) CheckDelegate(identity, resource string) error {
	if p.MayDelegate(identity, resource) {
		return nil
	}
	return fencegate.Errorf(fencegate.CodeForbidden, "the access policy does not let %q write %q as a delegate", identity, resource)
}

// CheckRead is MayRead as an error: FORBIDDEN naming identity and resource.
func (p *Policy) CheckRead(identity, resource string) error {
	if p.MayRead(identity, resource) {
		return nil
	}
	return fencegate.Errorf(fencegate.CodeForbidden, "the access policy does not let %q read %q", identity, resource)
}

func (p *Policy) allows(identity, resource string, patterns func(*Rule) []string) bool {
	if p == nil || identity == "" || resource == "" {
		return false
	}
	if p.open {
		return true
	}
	for i := range p.rules {
		r := &p.rules[i]
		if !r.names(identity) {
			continue
		}
		for _, pat := range patterns(r) {
			if matchesSubtree(pat, resource) {
				return true
			}
		}
	}
	return false
}

// names reports whether the rule applies to identity.
func (r *Rule) names(identity string) bool {
	if r.Identity != "" {
		return r.Identity == identity
	}
	if IsCNIdentity(identity) {
		return false // a CN identity is never a SAN
	}
	ok, _ := path.Match(r.SAN, identity)
	return ok
}

// matchesSubtree reports whether pattern matches resource or one of its
// ancestors ("a", "a/b" for "a/b/c").
func matchesSubtree(pattern, resource string) bool {
	for i := 0; i <= len(resource); i++ {
		if i < len(resource) && resource[i] != '/' {
			continue
		}
		if ok, _ := path.Match(pattern, resource[:i]); ok {
			return true
		}
	}
	return false
}
