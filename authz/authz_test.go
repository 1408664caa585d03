package authz_test

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authz"
)

func mustPolicy(t *testing.T, rules ...authz.Rule) *authz.Policy {
	t.Helper()
	p, err := authz.New(rules)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPolicyRules names each rule of the policy and checks it on a table.
func TestPolicyRules(t *testing.T) {
	p := mustPolicy(t,
		authz.Rule{Identity: "worker-a", Lease: []string{"local/inv/*"}, Read: []string{"local/reports"}},
		authz.Rule{Identity: "auditor", Read: []string{"local"}},
		authz.Rule{SAN: "spiffe://acme/billing/*", Lease: []string{"payouts/*"}},
	)
	type op int
	const (
		lease op = iota
		read
	)
	cases := []struct {
		rule     string
		identity string
		op       op
		resource string
		want     bool
	}{
		{"a lease pattern grants the resource it matches", "worker-a", lease, "local/inv/7", true},
		{"a lease pattern grants the subtree below a match", "worker-a", lease, "local/inv/7/part-1", true},
		{"a pattern never grants an ancestor of its matches", "worker-a", lease, "local/inv", false},
		{"a pattern never grants a whole store", "worker-a", lease, "local", false},
		{"star does not cross a slash", "worker-a", lease, "local/invoices/7", false},
		{"names are byte-exact: case is another resource", "worker-a", lease, "local/INV/7", false},
		{"leasing implies reading", "worker-a", read, "local/inv/7/part-1", true},
		{"read patterns grant reads", "worker-a", read, "local/reports/2026", true},
		{"read patterns never grant leases", "worker-a", lease, "local/reports", false},
		{"a read-only identity may read its subtree", "auditor", read, "local/inv/7", true},
		{"a read-only identity may lease nothing", "auditor", lease, "local/inv/7", false},
		{"a SAN pattern names matching identities", "spiffe://acme/billing/worker-1", lease, "payouts/acc_1", true},
		{"a SAN pattern's star does not cross a slash", "spiffe://acme/billing/ns/worker-1", lease, "payouts/acc_1", false},
		{"a SAN pattern names no other identity", "spiffe://acme/other/worker-1", lease, "payouts/acc_1", false},
		{"an identity no rule names is denied", "worker-z", read, "local/inv/7", false},
		{"rules are exact: an identity's prefix is not the identity", "worker", lease, "local/inv/7", false},
		{"the empty identity is denied", "", read, "local/inv/7", false},
	}
	for _, c := range cases {
		t.Run(c.rule, func(t *testing.T) {
			got := p.MayRead(c.identity, c.resource)
			check := p.CheckRead(c.identity, c.resource)
			if c.op == lease {
				got, check = p.MayLease(c.identity, c.resource), p.CheckLease(c.identity, c.resource)
			}
			if got != c.want {
				t.Fatalf("%s %v %s = %v, want %v", c.identity, c.op, c.resource, got, c.want)
			}
			if (check == nil) != c.want || (check != nil && fencegate.ErrorCode(check) != fencegate.CodeForbidden) {
				t.Fatalf("check = %v", check)
			}
		})
	}
}

func TestNoRulesDenyEverythingAndOpenPermitsEverything(t *testing.T) {
	for name, p := range map[string]*authz.Policy{"no rules": mustPolicy(t), "zero value": {}, "nil": nil} {
		if p.MayLease("worker-a", "local/inv/7") || p.MayRead("worker-a", "local/inv/7") || p.IsOpen() {
			t.Errorf("%s: a policy without rules permits", name)
		}
	}
	o := authz.Open()
	if !o.MayLease("anyone", "local") || !o.MayRead("anyone", "x/y") || !o.IsOpen() {
		t.Fatal("Open denies")
	}
}

func TestBadRulesAreRefusedAllAtOnce(t *testing.T) {
	_, err := authz.New([]authz.Rule{
		{Lease: []string{"a/*"}},
		{Identity: "w", SAN: "spiffe://x/*", Lease: []string{"a"}},
		{Identity: "w"},
		{Identity: "w", Lease: []string{"a//b", "a/../b", "a/[", ""}},
		{SAN: "spiffe://[", Read: []string{"a"}},
	})
	if err == nil {
		t.Fatal("bad rules accepted")
	}
	for _, want := range []string{"rule 1: needs exactly one", "rule 2: needs exactly one", "rule 3: grants nothing",
		`"a//b"`, `"a/../b"`, `"a/["`, `pattern "": empty`, `rule 5: san "spiffe://["`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// A delegate rule lets an identity write under another owner's delegation,
// never lease; leasing implies it, and it implies reading.
func TestDelegateRuleGrantsDelegatedWritesOnly(t *testing.T) {
	p := mustPolicy(t,
		authz.Rule{Identity: "coordinator", Lease: []string{"local/batch"}},
		authz.Rule{Identity: "consumer", Delegate: []string{"local/batch/*"}},
	)
	if !p.MayDelegate("consumer", "local/batch/7") || p.MayLease("consumer", "local/batch/7") {
		t.Fatal("consumer: a delegate rule grants delegated writes and no lease")
	}
	if !p.MayRead("consumer", "local/batch/7") {
		t.Fatal("consumer: a delegate rule implies reading")
	}
	if p.MayDelegate("consumer", "local/batch") || p.MayDelegate("consumer", "local/other/1") {
		t.Fatal("consumer: the delegate pattern grants only its subtree")
	}
	if !p.MayDelegate("coordinator", "local/batch/7") {
		t.Fatal("coordinator: leasing implies delegated writes")
	}
	if p.MayDelegate("stranger", "local/batch/7") {
		t.Fatal("an identity no rule names may not write as a delegate")
	}
	if err := p.CheckDelegate("consumer", "local/other"); fencegate.ErrorCode(err) != fencegate.CodeForbidden {
		t.Fatalf("CheckDelegate: %v", err)
	}
	if _, err := authz.New([]authz.Rule{{Identity: "x", Delegate: []string{"a/../b"}}}); err == nil {
		t.Fatal("a bad delegate pattern is refused")
	}
}

// Rule: a san pattern never names a CN identity ("cn:" and a certificate's
// free-text CN, authz.CNIdentity), whatever the pattern; an identity rule
// names it exactly.
func TestSANPatternNeverNamesACNIdentity(t *testing.T) {
	p := mustPolicy(t,
		authz.Rule{SAN: "*", Read: []string{"a"}},
		authz.Rule{SAN: "cn:*", Read: []string{"b"}},
		authz.Rule{Identity: authz.CNIdentity("worker"), Read: []string{"c"}},
	)
	id := authz.CNIdentity("worker")
	if id != "cn:worker" {
		t.Fatalf("CNIdentity(worker) = %q", id)
	}
	if p.MayRead(id, "a") || p.MayRead(id, "b") {
		t.Errorf("a san pattern names the CN identity %q", id)
	}
	if !p.MayRead(id, "c") {
		t.Errorf("the identity rule does not name the CN identity %q", id)
	}
	if !p.MayRead("worker", "a") {
		t.Error("san * no longer names the identity worker")
	}
}

// Rule: a CN identity is one that begins with "cn:" exactly (the form
// CNIdentity makes), the one test every layer asks (IsCNIdentity); like every
// identity it is compared exactly, so "CN:worker" is not one, and a san
// pattern still names it.
func TestCNIdentityIsTheLowerCaseCNPrefixExactly(t *testing.T) {
	for id, want := range map[string]bool{
		authz.CNIdentity("worker"): true,
		"cn:":                      true,
		"CN:worker":                false,
		"Cn:worker":                false,
		"worker":                   false,
		"spiffe://acme/cn:worker":  false,
	} {
		if got := authz.IsCNIdentity(id); got != want {
			t.Errorf("IsCNIdentity(%q) = %v, want %v", id, got, want)
		}
	}
	p := mustPolicy(t, authz.Rule{SAN: "*", Read: []string{"a"}})
	if p.MayRead("cn:worker", "a") || !p.MayRead("CN:worker", "a") {
		t.Error("san * names cn:worker, or no longer names CN:worker (not a CN identity)")
	}
}
