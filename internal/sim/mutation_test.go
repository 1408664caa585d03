package sim

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// edit turns the one occurrence of from in a file into to. Both are the
// header of an if statement ("if X {", optionally "if INIT; X {") or a case
// clause ("case X:"), or both are expressions of one type.
type edit struct{ from, to string }

// mutation is a deliberate break of one rule: its edits of File (relative to
// the module root). first lists seeds known to kill it, tried before the
// others (a hint that keeps the CI-sized run short: if the code moves on and
// they no longer kill it, the run goes on through the other seeds).
type mutation struct {
	name  string
	file  string
	edits []edit
	first []uint64
	// args are extra flags of its runs: a world aimed at the rule.
	args []string
}

func mut(name, file, from, to string, first ...uint64) mutation {
	return mutation{name: name, file: file, edits: []edit{{from, to}}, first: first}
}

const (
	rulesFile   = "fencestore/internal/fencerules/rules.go"
	acceptFile  = "gateway/accept.go"
	verifyFile  = "proofs/verifier.go"
	objResFile  = "gateway/objectresolver.go"
	localFile   = "backends/local/local.go"
	deferFile   = "gateway/deferred.go"
	journalFile = "fencestore/embedded/journal.go"
)

// mutations are the rules the simulation must defend: each fence rule, the
// status check, the owner binding, the resource cover, the epoch and policy
// checks, the settle order, the admission-time re-check, and the rule that a
// write settled NOT_APPLIED can no longer land (its expiry, the store's
// check of it, the reconciler's grace after it).
var mutations = []mutation{
	mut("STALE_OWNER: a lower fence is admitted", rulesFile,
		"if fence < row.HighestFence {", "if false {", 30),
	{name: "FENCE_REGRESSION: an equal fence under another lease or root is admitted", file: rulesFile,
		edits: []edit{{"if req.Grant.Lease != row.Lease || req.Grant.OperationRoot != row.Root {", "if false {"}},
		args:  []string{"-sim.operator", "0.2"}, first: []uint64{1}},
	mut("QUARANTINED: another payload for an accepted segment is answered as a replay", rulesFile,
		"if live.PayloadDigest == req.PayloadDigest && live.Target == req.Target && live.Method == req.Method && live.EffectKey == req.EffectKey {",
		"if live.Target == req.Target && live.Method == req.Method && live.EffectKey == req.EffectKey {", 0),
	mut("registry: an acquisition ignores the resource's live holder", "registry/embedded/backend.go",
		"if cur.Lease(req.Now).State == fencegate.StateHeld {", "if false {", 0),
	mut("reads: a receipt list of a resource with an effect in flight loses its receipts", "gateway/readstore.go",
		`if state == "" || r.State == state {`, "if r.State == state {", 0),
	mut("API: a resend that cannot connect settles FAILED (its first send may have been applied)", "backends/httpapi/call.go",
		"if first {", "if true {", 15),
	// The end gate reads the receipts the simulation saw admitted by ID:
	// a store whose state list leaves UNKNOWN out, so the reconcilers (and
	// a check of the lists) never see them, leaves them UNKNOWN for good.
	mut("receipt lists: the memory store's list by state leaves UNKNOWN receipts out", "fencestore/memory/memory.go",
		"func(r *fencegate.Receipt) bool { return r.State == state }",
		"func(r *fencegate.Receipt) bool { return r.State == state && state != fencegate.ReceiptUnknown }", 0),
	mut("one effect in flight: a pending receipt does not block admission", rulesFile,
		`if row.PendingReceipt != "" {`, "if false {", 1),
	mut("segment order: a new fence may start past segment 1", rulesFile,
		"if req.Segment != 1 {", "if false {", 4),
	mut("segment order: a segment may skip ahead", rulesFile,
		"if req.Segment != row.LastSegmentSeq+1 {", "if req.Segment <= row.LastSegmentSeq {", 1),
	mut("settle order: settling UNKNOWN clears the pending mark", rulesFile,
		"if row.PendingReceipt == settled.ID && settled.State != fencegate.ReceiptUnknown {",
		"if row.PendingReceipt == settled.ID {", 4),
	mut("status check: a proof that is not HELD authorizes", verifyFile,
		"case held && st.State != fencegate.StateHeld:", "case false:", 0),
	// A forged request the gateway lets through to the store: a revoked
	// delegation's write through a query-mode gateway (revokeMidway). The
	// gate on forged requests compares the store's state around their
	// admission, whatever the answer.
	mut("delegation (query mode): the gateway asks about the grant, not the delegation", acceptFile,
		"case g.cfg.Querier != nil && d != nil:", "case false:", 4),
	mut("owner binding: any caller may present a grant", acceptFile,
		"if d == nil && req.Caller != vg.Owner {", "if false {", 0),
	mut("resource cover: a grant covers any target", acceptFile,
		"if !fencegate.Covers(vg.Resource, req.Resource) {", "if false {", 14),
	{name: "epoch check: revoked epochs are not refused by the gateway", file: acceptFile, edits: []edit{
		{"if g.cfg.Policy.EpochRevoked(vg.IssuerEpoch) {", "if false {"},
		{"if g.cfg.Policy.EpochRevoked(st.IssuerEpoch) {", "if false {"}}, first: []uint64{27}},
	mut("policy check: grants of an old policy generation are admitted", acceptFile,
		"if cur := g.cfg.Policy.PolicyGeneration(); vg.PolicyGeneration < cur {",
		"if cur := g.cfg.Policy.PolicyGeneration(); false && vg.PolicyGeneration < cur {", 21),
	mut("admission re-check: a status that expired while waiting still admits", acceptFile,
		"if !expired && now.Sub(authorizedAt) < reauthorizeAfter {", "if true {", 11),
	mut("effect expiry: a write may land an hour after the expiry the reconciler assumes", acceptFile,
		"EffectExpiry(adm.Receipt, g.cfg.EffectTimeout)", "EffectExpiry(adm.Receipt, g.cfg.EffectTimeout).Add(time.Hour)", 7),
	mut("not-applied rule: the grace runs from admission, not from the write's expiry", objResFile,
		"EffectExpiry(r, effectTimeout).Add(fencegate.LandBySlack + o.Grace)", "r.CreatedAt.Add(o.Grace)", 22),
	// The If-Match chain (DESIGN §4), in the worlds with an out-of-band
	// writer (seeds 3 mod 5, oob_test.go): without an out-of-band change a
	// wrong If-Match is met only by late deliveries, whose receipts the
	// other gates cover (100 seeds passed with the check off).
	mut("object chain: the local store takes a write whose If-Match is not the object's ETag", "backends/local/put.go",
		"case cur.etag != req.IfMatch:", "case false:", 3),
	mut("object chain: a failed condition is taken for the write's own whenever the object can be read", "gateway/object.go",
		"if named && m.ReceiptID == r.ID {", "if herr == nil {"),
	mut("landing deadline: the store applies a write that arrives after it", localFile,
		"if ok && !s.now().Before(t) {", "if false {", 52),
	mut("deferred settle: an UNKNOWN write is answered before its effect is known durable", deferFile,
		`if out.State != fencegate.ReceiptCommitted || out.Version == "" {`, "if out.State == fencegate.ReceiptFailed {", 1),
	// The proofs (a busy admission elsewhere proves on its first busy
	// answer) heal a dropped entry before its process's next admission:
	// the process's own handling is checked without them, in the CI run's
	// noProofs world (its seeds 0..noProofSeeds-1 include the killers).
	{name: "deferred settle: a flush that fails without a verdict drops the entry", file: deferFile,
		edits: []edit{{"if err != nil && !isRuling(err) {", "if false {"}},
		args:  []string{"-sim.prove=false", "-sim.defer", "150ms"}, first: []uint64{34}},
	mut("deferred settle: the fold leaves the prior out of the admission", acceptFile,
		"&fencegate.PriorSettle{ReceiptID: prior.id, Outcome: prior.out}", "(*fencegate.PriorSettle)(nil)", 1),
	mut("deferred settle: the next admission does not wait for a flush in flight", deferFile,
		"if next == nil {", "if next == nil || next.state == deferBusy {", 7),
	// Read-repair proves the receipt from its object, which hides a read
	// that skips the flush; without prompt proofs the answering process
	// must read its own write (the window long enough for reads inside it).
	{name: "deferred settle: a read does not flush this process's deferred settle first", file: "gateway/readstore.go",
		edits: []edit{{"if e := s.g.deferred.ofReceipt(r.ID); e != nil {", "if e := s.g.deferred.ofReceipt(r.ID); false && e != nil {"}},
		args:  []string{"-sim.prove=false", "-sim.defer", "150ms"}, first: []uint64{5}},
	mut("deferred settle: the reconciler settles NOT_APPLIED although the object names the receipt", objResFile,
		"if m, ok := fencegate.ParseEffectMeta(info.Metadata); ok && m.ReceiptID == id {",
		"if m, ok := fencegate.ParseEffectMeta(info.Metadata); false && ok && m.ReceiptID == id {", 5),
	mut("registry memory: an acquisition is answered before the memory covers it", "registry/memory.go",
		"if covered {", "if true {", 42),
	// The embedded store's journal (layout 5), in worlds over that store,
	// whose journal is moved every few ops. The delete's killers are worlds
	// without the store's batch gather (gatherWorld: seeds 0 mod 4): its
	// broken worlds write on and on, and where every lone write waits for
	// company (seed 1: 31 s, against 1.5 to 3.5 s for seeds 0, 4, 8, 12)
	// the run drags.
	{name: "embedded journal: a read skips the journal's newer entry", file: journalFile,
		edits: []edit{{"if v := t.hot.Get(key); v != nil {", "if v := t.hot.Get(key); false && v != nil {"}},
		args:  []string{"-sim.store", "embedded"}, first: []uint64{2}},
	{name: "embedded journal: a delete leaves the moved entry in the big tree", file: journalFile,
		edits: []edit{{"[]*bolt.Bucket{t.hot, t.cold}", "[]*bolt.Bucket{t.hot}"}},
		args:  []string{"-sim.store", "embedded"}, first: []uint64{0, 4}},
	// Delegations (DESIGN §8), in the worlds whose owners delegate. The
	// binding of a delegation to its grant (proofs, BindsGrant) is left
	// out: it survives, as the delegation's status, by proof or by query,
	// binds the same grant and refuses another lease's delegation on its
	// own.
	mut("delegation: a delegated write outside the delegation's segments is admitted", "gateway/delegation.go",
		"case !d.CoversSegment(req.Segment):", "case false:", 4),
	mut("delegation: any caller may present a delegation", "gateway/delegation.go",
		"case req.Caller != d.Delegate:", "case false:", 1),
	mut("delegation: a revoked delegation is stated HELD", "registry/delegation.go",
		"case rec.Revoked:", "case false:", 1),
}

var mutationFlag = flag.String("sim.mutation", "", "run only the mutations whose name contains this")

// mutantSeeds is how many seeds a mutant gets at most, of the memory store
// unless its args name another (fail-fast: the first broken gate ends its
// run).
var mutantSeeds = flag.Int("sim.mutantseeds", 300, "seeds a mutant gets at most (of the memory store unless its args name another)")

// mutantEnv names the active mutant in a build of all of them.
const mutantEnv = "FENCEGATE_MUTANT"

// TestMutationsAreKilledBySimulation builds the simulation once with every
// mutation compiled in behind a switch (go test -overlay; the source tree is
// never touched), then runs it once per mutation (over the memory store
// unless the mutation's args name another), with
// that one switched on: every mutant must break a gate. It names every
// mutation that survived, fails if a mutation no longer applies to the
// source (the list must follow the code), and checks that the build with no
// mutant switched on keeps every gate.
func TestMutationsAreKilledBySimulation(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the simulation with the mutations")
	}
	if *seedFlag >= 0 || os.Getenv(mutantEnv) != "" {
		t.Skip("not inside a replay or a mutant")
	}
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var chosen []int
	for i, m := range mutations {
		if strings.Contains(m.name, *mutationFlag) {
			chosen = append(chosen, i)
		}
	}
	bin, err := buildMutants(root, dir, chosen)
	if err != nil {
		t.Fatal(err)
	}
	run := func(id string, seeds int, first []uint64, args ...string) (bool, string, time.Duration) {
		start := time.Now()
		var firsts []string
		for _, s := range first {
			firsts = append(firsts, fmt.Sprint(s))
		}
		cmd := exec.Command(bin, append([]string{"-test.run", "^TestSimWholeSystemKeepsEveryGate$", "-sim.store", "memory",
			"-sim.seeds", fmt.Sprint(seeds), "-sim.failfast", "-sim.first", strings.Join(firsts, ",")}, args...)...)
		cmd.Dir = filepath.Join(root, "internal", "sim")
		cmd.Env = append(os.Environ(), mutantEnv+"="+id)
		out, err := cmd.CombinedOutput()
		// Killed means the simulation ran and found a broken gate, not
		// that the mutant failed otherwise.
		return err != nil && strings.Contains(string(out), "broken invariants"), string(out), time.Since(start)
	}
	type result struct {
		killed bool
		took   time.Duration
		out    string
	}
	results := make([]result, len(mutations))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for _, i := range chosen {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			killed, out, took := run(fmt.Sprint("m", i), *mutantSeeds, mutations[i].first, mutations[i].args...)
			results[i] = result{killed, took, out}
		}()
	}
	wg.Wait()
	// With no mutant switched on the build is the real code: it keeps every gate.
	if killed, out, _ := run("none", 5, nil); killed || !strings.Contains(out, "PASS") {
		t.Errorf("the mutant build with no mutant switched on fails:\n%s", tail(out, 15))
	}
	var survived []string
	for _, i := range chosen {
		m, r := mutations[i], results[i]
		if !r.killed {
			survived = append(survived, m.name)
			t.Errorf("mutation survived: %s\n%s", m.name, tail(r.out, 15))
			continue
		}
		t.Logf("killed in %v at seed %s: %s (%s)", r.took.Round(100*time.Millisecond), killingSeed(r.out), m.name, firstFailure(r.out))
	}
	t.Logf("mutation score: %d of %d killed", len(chosen)-len(survived), len(chosen))
}

// buildMutants writes an overlay in which every edit of the chosen mutations
// is guarded by fgMutant("m<index>") and each mutated package gains a file
// defining it from $FENCEGATE_MUTANT, builds the simulation's test binary
// with it and returns the binary's path.
func buildMutants(root, dir string, chosen []int) (string, error) {
	srcs := map[string]string{} // file -> mutated source
	for _, i := range chosen {
		m := mutations[i]
		path := filepath.Join(root, m.file)
		src, ok := srcs[path]
		if !ok {
			b, err := os.ReadFile(path)
			if err != nil {
				return "", err
			}
			src = string(b)
		}
		for _, e := range m.edits {
			if n := strings.Count(src, e.from); n != 1 {
				return "", fmt.Errorf("mutation %q: %q occurs %d times in %s, want once: update the list to the code", m.name, e.from, n, m.file)
			}
			guarded, err := guard(fmt.Sprint("m", i), e)
			if err != nil {
				return "", fmt.Errorf("mutation %q: %v", m.name, err)
			}
			src = strings.Replace(src, e.from, guarded, 1)
		}
		srcs[path] = src
	}
	replace := map[string]string{}
	pkgs := map[string]string{} // package dir -> package name
	for path, src := range srcs {
		mutant := filepath.Join(dir, fmt.Sprintf("%d-%s", len(replace), filepath.Base(path)))
		if err := os.WriteFile(mutant, []byte(src), 0o644); err != nil {
			return "", err
		}
		replace[path] = mutant
		_, rest, _ := strings.Cut(src, "\npackage ")
		if strings.HasPrefix(src, "package ") {
			rest = strings.TrimPrefix(src, "package ")
		}
		name, _, _ := strings.Cut(rest, "\n")
		pkgs[filepath.Dir(path)] = strings.TrimSpace(name)
	}
	for pdir, name := range pkgs {
		sw := filepath.Join(dir, fmt.Sprintf("switch-%d.go", len(replace)))
		code := "package " + name + `

import "os"

var fgMutantActive = os.Getenv("` + mutantEnv + `")

func fgMutant(id string) bool { return fgMutantActive == id }

func fgPick[T any](mutant bool, m, orig T) T {
	if mutant {
		return m
	}
	return orig
}
`
		if err := os.WriteFile(sw, []byte(code), 0o644); err != nil {
			return "", err
		}
		replace[filepath.Join(pdir, "zz_fgmutant.go")] = sw
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": replace})
	ov := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ov, overlay, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "sim-mutants.test")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "test", "-c", "-overlay", ov, "-o", bin, "./internal/sim/")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the mutants: %v\n%s", err, out)
	}
	return bin, nil
}

// guard is e.from written so that it behaves as e.to when mutant id is
// switched on and as itself otherwise.
func guard(id string, e edit) (string, error) {
	on := fmt.Sprintf("fgMutant(%q)", id)
	cond := func(prefix, suffix string) (string, error) {
		from := strings.TrimSuffix(strings.TrimPrefix(e.from, prefix), suffix)
		to := strings.TrimSuffix(strings.TrimPrefix(e.to, prefix), suffix)
		init := ""
		if a, b, ok := strings.Cut(from, "; "); ok && prefix == "if " {
			ta, tb, tok := strings.Cut(to, "; ")
			if !tok || ta != a {
				return "", fmt.Errorf("%q and %q must share their init statement", e.from, e.to)
			}
			init, from, to = a+"; ", b, tb
		}
		return fmt.Sprintf("%s%s%s && (%s) || !%s && (%s)%s", prefix, init, on, to, on, from, suffix), nil
	}
	switch {
	case strings.HasPrefix(e.from, "if ") && strings.HasSuffix(e.from, " {"):
		return cond("if ", " {")
	case strings.HasPrefix(e.from, "case ") && strings.HasSuffix(e.from, ":"):
		return cond("case ", ":")
	}
	return fmt.Sprintf("fgPick(%s, %s, %s)", on, e.to, e.from), nil
}

// killingSeed is the seed a mutant's run failed at ("seed N:" in its output).
func killingSeed(out string) string {
	_, rest, ok := strings.Cut(out, " seed ")
	if !ok {
		return "?"
	}
	seed, _, _ := strings.Cut(rest, ":")
	return seed
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func firstFailure(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "first: "); i >= 0 {
			return strings.TrimSpace(l[i+len("first: "):])
		}
	}
	return "?"
}
