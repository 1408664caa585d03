package main

import (
	"errors"
	"os"
	"path/filepath"
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
