package main

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
)

// TestExitStatusSaysWhatHappened: 0 done, 1 refused by the gateway (its
// code), 2 usage, 3 outcome unknown (no answer, MUTATION_UNKNOWN or INTERNAL), 4 a
// local failure (README, "fencectl").
func TestExitStatusSaysWhatHappened(t *testing.T) {
	h := newHarness(t)
	file := filepath.Join(h.dir, "part")
	if err := os.WriteFile(file, []byte("bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A closed port: nothing answers.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	cases := []struct {
		name string
		args []string
		pre  func()
		want int
		code string
	}{
		{"NoLeaseFileIsLocal", []string{"put", "bucket/jobs/a", file}, nil, exitLocal, codeLocal},
		{"Acquired", []string{"acquire", "bucket/jobs", "--ttl", "10s", "--operation", "op-1"}, nil, exitOK, ""},
		{"Written", []string{"put", "bucket/jobs/a", file}, nil, exitOK, ""},
		{"MissingFileIsLocal", []string{"put", "bucket/jobs/a", filepath.Join(h.dir, "absent")}, nil, exitLocal, codeLocal},
		{"UnknownCommandIsUsage", []string{"frobnicate"}, nil, exitUsage, codeUsage},
		{"MissingArgumentIsUsage", []string{"put", "bucket/jobs/a"}, nil, exitUsage, codeUsage},
		{"BadFlagIsUsage", []string{"put", "bucket/jobs/a", file, "--segment", "x"}, nil, exitUsage, codeUsage},
		// Rule: a flag value out of range is a usage mistake (exit 2, nothing
		// sent), not a refusal (exit 1) from the client library's own check
		// (client.NewLease refused a TTL <= 0 with INVALID_REQUEST), nor a
		// value silently replaced (renew's default TTL, the gateway's page
		// size) or acted on (a negative --grace sent SIGKILL at once).
		{"ZeroTTLIsUsage", []string{"acquire", "bucket/jobs", "--ttl", "0s", "--operation", "op-1"}, nil, exitUsage, codeUsage},
		{"NegativeTTLIsUsage", []string{"acquire", "bucket/jobs", "--ttl", "-5s", "--operation", "op-1"}, nil, exitUsage, codeUsage},
		{"SubMillisecondTTLIsUsage", []string{"acquire", "bucket/jobs", "--ttl", "500us", "--operation", "op-1"}, nil, exitUsage, codeUsage},
		{"RunZeroTTLIsUsage", []string{"run", "--resource", "bucket/jobs", "--ttl", "0s", "--", "true"}, nil, exitUsage, codeUsage},
		{"RunNegativeTTLIsUsage", []string{"run", "--resource", "bucket/jobs", "--ttl", "-5s", "--", "true"}, nil, exitUsage, codeUsage},
		{"RunNegativeGraceIsUsage", []string{"run", "--resource", "bucket/jobs", "--operation", "op-1", "--ttl", "10s", "--grace", "-1s", "--", "true"}, nil, exitUsage, codeUsage},
		{"RunBadEndpointIsUsageBeforeAcquiring", []string{"run", "--resource", "bucket/jobs", "--operation", "op-1", "--ttl", "10s", "--s3-endpoint", "nohost", "--", "true"}, nil, exitUsage, codeUsage},
		{"RenewNegativeTTLIsUsage", []string{"renew", "--ttl", "-1s"}, nil, exitUsage, codeUsage},
		{"NegativeLimitIsUsage", []string{"receipts", "--operation", "op-1", "--limit", "-1"}, nil, exitUsage, codeUsage},
		{"OversizedLimitIsUsage", []string{"receipts", "--operation", "op-1", "--limit", strconv.Itoa(fencegate.MaxPageLimit + 1)}, nil, exitUsage, codeUsage},
		{"DownwardSegmentRangeIsUsage", []string{"delegate", "consumer", "--segments", "5-3"}, nil, exitUsage, codeUsage},
		// Rule: so is a call method a fenced call cannot have (client.CallAPI
		// refused it with a local INVALID_REQUEST, exit 1).
		{"CallReadIsUsage", []string{"call", "crm", "GET", "/contacts"}, nil, exitUsage, codeUsage},
		{"SegmentZeroIsUsage", []string{"delegate", "consumer", "--segments", "0,1"}, nil, exitUsage, codeUsage},
		// Rule: --segments is checked by the domain's rule
		// (fencegate.CheckDelegatedSegments) before the lease file is read: a
		// repeated number or a set longer than the registry mints is a usage
		// mistake, not a refusal from the client's or the registry's check.
		{"RepeatedSegmentIsUsage", []string{"delegate", "consumer", "--segments", "2,3,2"}, nil, exitUsage, codeUsage},
		{"OversizedSegmentSetIsUsage", []string{"delegate", "consumer", "--segments", segmentSet(fencegate.MaxDelegationSegments + 1)}, nil, exitUsage, codeUsage},
		{"RefusedTokenIsRefused", []string{"--token", "bad", "receipts", "--operation", "op-1"}, nil, exitRefused, "UNAUTHENTICATED"},
		{"StaleOwnerIsRefused", []string{"put", "bucket/jobs/a", file, "--segment", "9"}, func() { h.fake.stale = true }, exitRefused, "STALE_OWNER"},
		{"MutationUnknownIsUnknown", []string{"put", "bucket/jobs/a", file, "--segment", "9"}, func() { h.fake.stale, h.fake.unknown = false, true }, exitUnknown, "MUTATION_UNKNOWN"},
		{"NoAnswerIsUnknown", []string{"--gateway", closed, "receipts", "--operation", "op-1"}, nil, exitUnknown, codeUncertain},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.pre != nil {
				c.pre()
			}
			before := h.snapshotLease(t)
			code, _, errOut := h.run(c.args...)
			if code != c.want {
				t.Fatalf("exit %d, want %d; stderr %q", code, c.want, errOut)
			}
			if c.want == exitUsage {
				// Rule: a usage mistake writes nothing, the lease file
				// (there from "Acquired" on) included.
				defer h.leaseUnchanged(t, before, strings.Join(c.args, " "))
			}
			if c.code != "" {
				// The same failure with --json names the same code and exit status.
				code, out, errOut := h.run(append([]string{"--json"}, c.args...)...)
				var d errorDoc
				if err := json.Unmarshal([]byte(errOut), &d); err != nil || strings.Count(errOut, "\n") != 1 {
					t.Fatalf("--json stderr is not one JSON object: %q (%v)", errOut, err)
				}
				if code != c.want || d.Code != c.code || d.ExitCode != c.want || d.Detail == "" || out != "" {
					t.Fatalf("--json: exit %d, doc %+v, stdout %q", code, d, out)
				}
			}
		})
	}
}

// TestJSONErrorIsAProblemObject: with --json a refusal is printed on stderr
// as one problem+json-shaped object (type and title as the gateway spells
// them, the code, the detail, the receipt, fencectl's hint and exit status);
// stdout stays empty.
func TestJSONErrorIsAProblemObject(t *testing.T) {
	h := newHarness(t)
	if code, _, e := h.run("acquire", "bucket/jobs", "--ttl", "10s", "--operation", "op-1"); code != 0 {
		t.Fatalf("acquire: %s", e)
	}
	h.fake.unknown = true
	stdin = strings.NewReader("payload")
	t.Cleanup(func() { stdin = os.Stdin })
	code, out, errOut := h.run("--json", "put", "bucket/jobs/a", "-")
	var m map[string]any
	if err := json.Unmarshal([]byte(errOut), &m); err != nil {
		t.Fatalf("stderr %q: %v", errOut, err)
	}
	want := map[string]any{"type": "urn:fencegate:problem:mutation_unknown", "title": "mutation unknown", "code": "MUTATION_UNKNOWN",
		"detail": "the store did not answer", "receiptId": "R9", "hint": hints["MUTATION_UNKNOWN"], "exitCode": float64(exitUnknown)}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	if code != exitUnknown || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	// Without --json, the same failure reads as text.
	code, _, errOut = h.run("put", "bucket/jobs/a", "-")
	if code != exitUnknown || !strings.HasPrefix(errOut, "error: MUTATION_UNKNOWN: the store did not answer (receipt R9)\nhint: ") {
		t.Fatalf("text: exit %d stderr %q", code, errOut)
	}
}

// TestInternalIsAnUnknownOutcome: INTERNAL implies nothing about the
// request (the gateway answers it for a fault anywhere, also after the
// effect was forwarded), so it exits as an unknown outcome (3), like
// MUTATION_UNKNOWN, not as a refusal that took no effect (1).
func TestInternalIsAnUnknownOutcome(t *testing.T) {
	for code, want := range map[fencegate.Code]int{
		fencegate.CodeInternal: exitUnknown, fencegate.CodeMutationUnknown: exitUnknown, fencegate.CodeStaleOwner: exitRefused,
	} {
		if d := describe(&fencegate.Error{Code: code, Message: "x"}); d.ExitCode != want {
			t.Errorf("%s exits %d, want %d", code, d.ExitCode, want)
		}
	}
}

// segmentSet is --segments "2,3,...": n segments from 2 on.
func segmentSet(n int) string {
	s := make([]string, n)
	for i := range s {
		s[i] = strconv.Itoa(i + 2)
	}
	return strings.Join(s, ",")
}
