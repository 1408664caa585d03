package sim

import (
	"bytes"
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

// mutation is a deliberate break of one rule: the n occurrences of From in
// File (relative to the module root) become To. The test applies it to a
// copy through `go test -overlay`; the source tree is never touched.
type mutation struct {
	name     string
	file     string
	from, to string
	n        int // occurrences of from (default 1)
}

const (
	rulesFile  = "fencestore/internal/fencerules/rules.go"
	acceptFile = "gateway/accept.go"
	verifyFile = "proofs/verifier.go"
)

// mutations are the rules the simulation must defend: each fence rule, the
// status check, the owner binding, the resource cover, the epoch and policy
// checks, the settle order and the admission-time re-check.
var mutations = []mutation{
	{name: "STALE_OWNER: a lower fence is admitted", file: rulesFile,
		from: "if fence < row.HighestFence {", to: "if false && fence < row.HighestFence {"},
	{name: "FENCE_REGRESSION: an equal fence under another lease or root is admitted", file: rulesFile,
		from: "if req.Grant.Lease != row.Lease || req.Grant.OperationRoot != row.Root {", to: "if false {"},
	{name: "QUARANTINED: another payload for an accepted segment is answered as a replay", file: rulesFile,
		from: "live.PayloadDigest == req.PayloadDigest && ", to: ""},
	{name: "one effect in flight: a pending receipt does not block admission", file: rulesFile,
		from: `if row.PendingReceipt != "" {`, to: `if false && row.PendingReceipt != "" {`},
	{name: "segment order: a new fence may start past segment 1", file: rulesFile,
		from: "if req.Segment != 1 {", to: "if false {"},
	{name: "segment order: a segment may skip ahead", file: rulesFile,
		from: "if req.Segment != row.LastSegmentSeq+1 {", to: "if req.Segment <= row.LastSegmentSeq {"},
	{name: "settle order: settling UNKNOWN clears the pending mark", file: rulesFile,
		from: "if row.PendingReceipt == settled.ID && settled.State != fencegate.ReceiptUnknown {",
		to:   "if row.PendingReceipt == settled.ID {"},
	{name: "status check: a proof that is not HELD authorizes", file: verifyFile,
		from: "case st.State != fencegate.StateHeld:", to: "case false && st.State != fencegate.StateHeld:"},
	{name: "owner binding: any caller may present a grant", file: acceptFile,
		from: "if req.Caller != vg.Owner {", to: "if false {"},
	{name: "resource cover: a grant covers any target", file: acceptFile,
		from: "if !fencegate.Covers(vg.Resource, req.Resource) {", to: "if false {"},
	{name: "epoch check: revoked epochs are not refused by the gateway", file: acceptFile,
		from: "if g.cfg.Policy.EpochRevoked(", to: "if false && g.cfg.Policy.EpochRevoked(", n: 2},
	{name: "policy check: grants of an old policy generation are admitted", file: acceptFile,
		from: "vg.PolicyGeneration < cur {", to: "vg.PolicyGeneration < cur && false {"},
	{name: "admission re-check: a status that expired while waiting still admits", file: acceptFile,
		from: "if !expired && now.Sub(authorizedAt) < reauthorizeAfter {", to: "if !expired && now.Sub(authorizedAt) < reauthorizeAfter || true {"},
}

var mutationFlag = flag.String("sim.mutation", "", "run only the mutations whose name contains this")

// mutantSeeds is how many memory-store seeds a mutant gets (fail-fast).
const mutantSeeds = 300

// TestMutationsAreKilledBySimulation builds the simulation once per mutation
// and runs it over the memory store: every mutant must break a gate. It names
// every mutation that survived, and fails if a mutation no longer applies to
// the source (the list must follow the code).
func TestMutationsAreKilledBySimulation(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the simulation once per mutation")
	}
	if *seedFlag >= 0 || os.Getenv("FENCEGATE_MUTANT") != "" {
		t.Skip("not inside a replay or a mutant")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	dir := t.TempDir()
	type result struct {
		killed bool
		took   time.Duration
		out    string
	}
	results := make([]result, len(mutations))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for i, m := range mutations {
		if !strings.Contains(m.name, *mutationFlag) {
			continue
		}
		path := filepath.Join(root, m.file)
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want := max(m.n, 1)
		if got := strings.Count(string(src), m.from); got != want {
			t.Errorf("mutation %q: %q occurs %d times in %s, want %d: update the list to the code", m.name, m.from, got, m.file, want)
			continue
		}
		mutant := filepath.Join(dir, fmt.Sprintf("m%d-%s", i, filepath.Base(m.file)))
		if err := os.WriteFile(mutant, []byte(strings.ReplaceAll(string(src), m.from, m.to)), 0o644); err != nil {
			t.Fatal(err)
		}
		overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{path: mutant}})
		ov := filepath.Join(dir, fmt.Sprintf("m%d.json", i))
		if err := os.WriteFile(ov, overlay, 0o644); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			start := time.Now()
			cmd := exec.Command(goBin, "test", "-overlay", ov, "-count=1", "-run", "^TestSimWholeSystemKeepsEveryGate$",
				"./internal/sim/", "-args", "-sim.store", "memory", "-sim.seeds", fmt.Sprint(mutantSeeds), "-sim.failfast")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "FENCEGATE_MUTANT="+m.name)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			// Killed means the simulation ran and found a broken gate, not
			// that the mutant failed to build.
			killed := err != nil && strings.Contains(out.String(), "broken invariants")
			results[i] = result{killed: killed, took: time.Since(start), out: out.String()}
		}()
	}
	wg.Wait()
	var survived []string
	ran := 0
	for i, m := range mutations {
		r := results[i]
		if r.out == "" {
			continue // filtered out, or not applied (reported above)
		}
		ran++
		if !r.killed {
			survived = append(survived, m.name)
			t.Errorf("mutation survived: %s\n%s", m.name, tail(r.out, 15))
			continue
		}
		t.Logf("killed in %v: %s (%s)", r.took.Round(100*time.Millisecond), m.name, firstFailure(r.out))
	}
	t.Logf("mutation score: %d of %d killed", ran-len(survived), ran)
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
