package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

// flockWaiter reports whether this process waits for a flock (a "->"
// line of its PID in /proc/locks).
func flockWaiter(t *testing.T) bool {
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Fatal(err)
	}
	pid := strconv.Itoa(os.Getpid())
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[1] == "->" && f[2] == "FLOCK" && f[5] == pid {
			return true
		}
	}
	return false
}

// acquiredWithAFile is a harness with a lease acquired and a file to put.
func acquiredWithAFile(t *testing.T) (*harness, string) {
	t.Helper()
	h := newHarness(t)
	if code, _, errOut := h.run("acquire", "bucket/jobs", "--ttl", "10s", "--operation", "op-1"); code != 0 {
		t.Fatalf("acquire: %s", errOut)
	}
	file := filepath.Join(h.dir, "data")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	return h, file
}

// heldPut starts a put of file to bucket/jobs/a that the fake gateway holds
// until the returned channel is closed, and returns once it has arrived
// there; its exit status goes to done.
func (h *harness) heldPut(file string, done chan<- int) chan struct{} {
	hold, entered := make(chan struct{}), make(chan struct{})
	h.fake.mu.Lock()
	h.fake.hold, h.fake.entered = hold, entered
	h.fake.mu.Unlock()
	go func() { code, _, _ := h.run("put", "bucket/jobs/a", file); done <- code }()
	<-entered
	return hold
}

// Rule: fencectl verbs on one lease file run one at a time (it is locked
// from read to write back), so two writes started together take distinct
// segments, the second numbered after the first.
func TestTwoPutsOnOneLeaseFileTakeDistinctSegments(t *testing.T) {
	h, file := acquiredWithAFile(t)
	done := make(chan int, 2)
	hold := h.heldPut(file, done) // the first put is at the gateway, its lease file read
	go func() { code, _, _ := h.run("put", "bucket/jobs/b", file); done <- code }()
	for { // the second waits for the lease file, or (unlocked) reaches the gateway
		h.fake.mu.Lock()
		n := len(h.fake.writes)
		h.fake.mu.Unlock()
		if n > 0 || flockWaiter(t) {
			break
		}
	}
	close(hold)
	if a, b := <-done, <-done; a != 0 || b != 0 {
		t.Fatalf("exit statuses %d, %d", a, b)
	}
	h.fake.mu.Lock()
	defer h.fake.mu.Unlock()
	if len(h.fake.writes) != 2 || h.fake.writes[0].Get("Fence-Segment") == h.fake.writes[1].Get("Fence-Segment") {
		t.Fatalf("two puts on one lease file sent segments %q and %q", h.fake.writes[0].Get("Fence-Segment"), h.fake.writes[1].Get("Fence-Segment"))
	}
}

// Rule: a write the gateway accepted whose lease file cannot be written
// afterwards exits 5 (NOT_RECORDED), shows its receipt, and names the
// segment the next write must give; never exit 4, "nothing was sent".
func TestAnAcceptedWriteWhoseLeaseFileFailsIsNotRecorded(t *testing.T) {
	h, file := acquiredWithAFile(t)
	saved := writeFile
	writeFile = func(string, []byte, os.FileMode) error { return errors.New("no space left on device") }
	defer func() { writeFile = saved }()
	code, out, errOut := h.run("put", "bucket/jobs/a", file)
	if code != exitNotRecorded || !strings.Contains(out, "COMMITTED") || !strings.Contains(errOut, "NOT_RECORDED") || !strings.Contains(errOut, "--segment 2") {
		t.Fatalf("exit %d\nstdout %s\nstderr %s\nwant exit %d, the receipt shown and --segment 2 named", code, out, errOut, exitNotRecorded)
	}
}

// Rule: a status refresh (as renew and release) is not held up by a write
// uploading under the lease file (it calls the registry without the file's
// lock), and the answer it keeps does not take back the next segment the
// write recorded.
func TestStatusBesideAnUploadingPutGoesAtOnceAndKeepsItsSegment(t *testing.T) {
	h, file := acquiredWithAFile(t)
	done := make(chan int, 1)
	hold := h.heldPut(file, done) // the put holds the lease file, uploading
	h.fake.mu.Lock()
	before := h.fake.statuses
	h.fake.mu.Unlock()
	renewed := make(chan int, 1)
	go func() { code, _, _ := h.run("status"); renewed <- code }()
	for { // the status reaches the registry, or (locked out) waits for the file
		h.fake.mu.Lock()
		n := h.fake.statuses - before
		h.fake.mu.Unlock()
		if n > 0 || flockWaiter(t) {
			break
		}
	}
	h.fake.mu.Lock()
	n := h.fake.statuses - before
	h.fake.mu.Unlock()
	close(hold)
	if code := <-done; code != 0 {
		t.Fatalf("put: exit %d", code)
	}
	if code := <-renewed; code != 0 {
		t.Fatalf("status: exit %d", code)
	}
	if n == 0 {
		t.Fatal("the status refresh waited for the uploading put's lease file lock")
	}
	if code, _, errOut := h.run("put", "bucket/jobs/b", file); code != 0 {
		t.Fatalf("the next put: %s", errOut)
	}
	h.fake.mu.Lock()
	defer h.fake.mu.Unlock()
	if got := h.fake.writes[len(h.fake.writes)-1].Get("Fence-Segment"); got != "2" {
		t.Fatalf("the write after the status refresh went out as segment %s, want 2", got)
	}
}

// Rule: an answer got without the lease file's lock never brings an ended
// lease back to HELD (a release saved meanwhile); a HELD replaces a HELD
// (also one ending sooner: renew --ttl may shorten the lease), and an
// ended state replaces a HELD.
func TestALeaseAnswerMergesOnlyForward(t *testing.T) {
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	file := func(st fencegate.StatusState, exp time.Time) *leaseFile {
		return &leaseFile{Lease: client.LeaseInfo{Lease: "L1", State: st, ExpiresAt: exp}}
	}
	answer := func(st fencegate.StatusState, exp time.Time) client.LeaseInfo {
		return client.LeaseInfo{Lease: "L1", State: st, ExpiresAt: exp}
	}
	for _, c := range []struct {
		name string
		lf   *leaseFile
		info client.LeaseInfo
		want bool
	}{
		{"held over released", file(fencegate.StateReleased, at), answer(fencegate.StateHeld, at.Add(time.Minute)), false},
		{"held over expired", file(fencegate.StateExpired, at), answer(fencegate.StateHeld, at.Add(time.Minute)), false},
		{"held ending sooner (a shorter renewal)", file(fencegate.StateHeld, at), answer(fencegate.StateHeld, at.Add(-time.Second)), true},
		{"held ending later", file(fencegate.StateHeld, at), answer(fencegate.StateHeld, at.Add(time.Second)), true},
		{"released over held", file(fencegate.StateHeld, at), answer(fencegate.StateReleased, at), true},
	} {
		if got := c.lf.newer(c.info); got != c.want {
			t.Errorf("%s: newer = %v, want %v", c.name, got, c.want)
		}
	}
}

// segmentsSent are the Fence-Segment headers of the writes the fake
// gateway answered (not those answered MUTATION_UNKNOWN).
func (h *harness) segmentsSent() string {
	h.fake.mu.Lock()
	defer h.fake.mu.Unlock()
	var segs []string
	for _, w := range h.fake.writes {
		segs = append(segs, w.Get("Fence-Segment"))
	}
	return strings.Join(segs, ",")
}

// uncertainPut puts file to bucket/jobs/a, answered MUTATION_UNKNOWN with
// receipt R9 left in state (none if ""), and checks it exits 3.
func (h *harness) uncertainPut(file string, state fencegate.ReceiptState) {
	h.t.Helper()
	h.fake.mu.Lock()
	h.fake.unknown, h.fake.unknownState = true, state
	h.fake.mu.Unlock()
	if code, _, errOut := h.run("put", "bucket/jobs/a", file); code != exitUnknown {
		h.t.Fatalf("uncertain put: exit %d %s", code, errOut)
	}
	h.fake.mu.Lock()
	h.fake.unknown = false
	h.fake.mu.Unlock()
}

// leaseNumbering is what the lease file says about the lease's segments.
type leaseNumbering struct {
	NextSegment uint64 `json:"nextSegment"`
	Doubt       *struct {
		Segment uint64 `json:"segment"`
		Receipt string `json:"receipt"`
	} `json:"doubt"`
}

// numbering reads the lease file's next segment and segment in doubt.
func (h *harness) numbering() leaseNumbering {
	h.t.Helper()
	var n leaseNumbering
	b, err := os.ReadFile(filepath.Join(h.dir, "lease.json"))
	if err == nil {
		err = json.Unmarshal(b, &n)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// twoFiles writes files a and b, of different content, for put.
func (h *harness) twoFiles() (a, b string) {
	h.t.Helper()
	a, b = filepath.Join(h.dir, "a"), filepath.Join(h.dir, "b")
	if err := errors.Join(os.WriteFile(a, []byte("AAA"), 0o600), os.WriteFile(b, []byte("BBB"), 0o600)); err != nil {
		h.t.Fatal(err)
	}
	return a, b
}

// Rule: a write after an uncertain one (MUTATION_UNKNOWN) settles the
// segment in doubt from the receipts first, as the Go client does: admitted,
// another write takes the segment after it, and the uncertain write itself
// goes at its own segment again (a replay the gateway answers with the
// first receipt, not a second effect); never admitted, or settled FAILED,
// the segment is free. The lease file recorded nothing of the doubt, and a
// different payload was sent at the admitted segment (QUARANTINED).
func TestAWriteAfterAnUncertainOneNumbersAfterTheSegmentIfAdmitted(t *testing.T) {
	for _, c := range []struct {
		state fencegate.ReceiptState
		same  bool   // the uncertain write again, not another
		want  string // the segment it goes at
	}{
		{fencegate.ReceiptCommitted, false, "2"},
		{fencegate.ReceiptCommitted, true, "1"},
		{fencegate.ReceiptFailed, false, "1"},
		{"", false, "1"},
	} {
		t.Run(fmt.Sprintf("%s,same=%v", c.state, c.same), func(t *testing.T) {
			h, _ := acquiredWithAFile(t)
			a, b := h.twoFiles()
			h.uncertainPut(a, c.state)
			args := []string{"put", "bucket/jobs/b", b}
			if c.same {
				args = []string{"put", "bucket/jobs/a", a}
			}
			if code, _, errOut := h.run(args...); code != 0 {
				t.Fatalf("put after it: exit %d %s", code, errOut)
			}
			if got := h.segmentsSent(); got != c.want {
				t.Fatalf("the write after the uncertain one went at segment %s, want %s", got, c.want)
			}
			if lf := h.numbering(); lf.Doubt != nil || lf.NextSegment != 3 && c.want == "2" {
				t.Fatalf("lease file after: next segment %d, doubt %+v", lf.NextSegment, lf.Doubt)
			}
		})
	}
}

// Rule: while the segment in doubt is unsettled (PENDING, UNKNOWN), only
// the write in doubt is sent again, at its segment (a replay if it was
// admitted); any other write, one from stdin (whose body cannot be compared
// before it is sent) and a delegation are refused, nothing sent, with the
// segment and its receipt named.
func TestOnlyTheUncertainWriteIsSentWhileItsSegmentIsUnsettled(t *testing.T) {
	h, _ := acquiredWithAFile(t)
	a, b := h.twoFiles()
	h.uncertainPut(a, fencegate.ReceiptPending)
	doubted := h.numbering()
	stdin = strings.NewReader("AAA")
	t.Cleanup(func() { stdin = os.Stdin })
	for _, args := range [][]string{{"put", "bucket/jobs/b", b}, {"put", "bucket/jobs/a", "-"}, {"delete", "bucket/jobs/a"},
		{"put", "bucket/jobs/a", a, "--segment", "2"}, {"delegate", "consumer", "--segments", "1-3"}} {
		code, _, errOut := h.run(args...)
		if code != exitUnknown || !strings.Contains(errOut, "MUTATION_UNKNOWN: segment 1 of lease L1 (PUT objects/bucket/jobs/a) is still PENDING") ||
			!strings.Contains(errOut, "(receipt R9)") {
			t.Fatalf("%v: exit %d\n%s", args, code, errOut)
		}
		if len(args) > 2 && args[2] == "-" && !strings.Contains(errOut, "give it as a FILE") {
			t.Fatalf("stdin put: %s", errOut)
		}
	}
	if got := h.segmentsSent(); got != "" {
		t.Fatalf("writes sent while segment 1 was unsettled: %s", got)
	}
	if got := h.numbering(); !reflect.DeepEqual(got, doubted) {
		t.Fatalf("the refused commands changed the lease file's numbering: %+v -> %+v", doubted, got)
	}
	if code, _, errOut := h.run("put", "bucket/jobs/a", a); code != 0 {
		t.Fatalf("the uncertain write again: exit %d %s", code, errOut)
	}
	if code, _, errOut := h.run("put", "bucket/jobs/b", b); code != 0 {
		t.Fatalf("the next write: exit %d %s", code, errOut)
	}
	if got := h.segmentsSent(); got != "1,2" {
		t.Fatalf("segments sent %s, want the write in doubt again at 1, then 2", got)
	}
}

// Rule: a write after an uncertain one whose doubt the receipts cannot
// settle (the list answers 503, or the lookup of the receipt the answer
// named fails otherwise than NOT_FOUND) is refused, nothing sent, the lease
// file byte for byte as it was (its doubt kept); once the receipts answer,
// the next write settles it. A failed read taken for "nothing admitted"
// would send it at the admitted segment 1, or free that segment.
func TestAWriteWhoseDoubtCannotBeSettledIsRefusedAndTheDoubtKept(t *testing.T) {
	for _, c := range []struct {
		rule  string
		state fencegate.ReceiptState // of the receipt the uncertain put left ("" none: only the lookup of R9 tells)
		down  func(f *fakeGateway, down bool)
		want  string // the segment the write goes at once the receipts answer
	}{
		{"the list answers 503", fencegate.ReceiptCommitted, func(f *fakeGateway, down bool) { f.listDown = down }, "2"},
		{"the named receipt's lookup answers 503", "", func(f *fakeGateway, down bool) { f.lookupDown = down }, "1"},
	} {
		t.Run(c.rule, func(t *testing.T) {
			h, _ := acquiredWithAFile(t)
			a, b := h.twoFiles()
			h.uncertainPut(a, c.state)
			snap := h.snapshotLease(t)
			h.fake.mu.Lock()
			c.down(h.fake, true)
			h.fake.mu.Unlock()
			code, _, errOut := h.run("put", "bucket/jobs/b", b)
			if code == 0 || !strings.Contains(errOut, "BACKEND_UNAVAILABLE") {
				t.Fatalf("put while the receipts fail: exit %d %s", code, errOut)
			}
			if got := h.segmentsSent(); got != "" {
				t.Fatalf("a write was sent while its doubt could not be settled: segment %s", got)
			}
			h.leaseUnchanged(t, snap, "the refused put")
			if lf := h.numbering(); lf.Doubt == nil || lf.Doubt.Segment != 1 || lf.Doubt.Receipt != "R9" {
				t.Fatalf("the doubt was not kept: %+v", lf.Doubt)
			}
			h.fake.mu.Lock()
			c.down(h.fake, false)
			h.fake.mu.Unlock()
			if code, _, errOut := h.run("put", "bucket/jobs/b", b); code != 0 {
				t.Fatalf("put once the receipts answer: exit %d %s", code, errOut)
			}
			if got := h.segmentsSent(); got != c.want {
				t.Fatalf("once the receipts answer, the write went at segment %s, want %s", got, c.want)
			}
			if lf := h.numbering(); lf.Doubt != nil {
				t.Fatalf("the doubt was not settled: %+v", lf.Doubt)
			}
		})
	}
}

// Rule: acquire repeated with the same request ID answers the same lease;
// the lease file keeps its next segment and its write in doubt (it was
// reset to segment 1, and the next write was QUARANTINED).
func TestReacquiringTheSameLeaseKeepsItsNumbering(t *testing.T) {
	h, file := acquiredWithAFile(t)
	if code, _, errOut := h.run("put", "bucket/jobs/a", file); code != 0 {
		t.Fatalf("put: %s", errOut)
	}
	h.uncertainPut(file, fencegate.ReceiptPending)
	if code, _, errOut := h.run("acquire", "bucket/jobs", "--ttl", "10s", "--operation", "op-1", "--request-id", "req-1"); code != 0 {
		t.Fatalf("acquire again: %s", errOut)
	}
	if lf := h.numbering(); lf.NextSegment != 2 || lf.Doubt == nil || lf.Doubt.Segment != 2 || lf.Doubt.Receipt != "R9" {
		t.Fatalf("lease file after acquiring the same lease again: next segment %d, doubt %+v", lf.NextSegment, lf.Doubt)
	}
}
