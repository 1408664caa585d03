package s3door_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/s3door"
)

// The open uploads of ended leases give way to a CreateMultipartUpload
// their count would refuse (ended.go).

// countedCreds is Credentials whose reads are counted by access key ID and
// fail (BACKEND_UNAVAILABLE, a registry that cannot be asked) for those in
// failing; hook, if set, is called with ctx and the access key ID of each
// read once it is counted, before it is answered.
type countedCreds struct {
	fencegate.S3Credentials
	mu      sync.Mutex
	reads   map[string]int
	failing map[string]bool
	hook    func(ctx context.Context, akid string)
}

func (c *countedCreds) LookupS3(ctx context.Context, akid string) (fencegate.S3Credential, error) {
	c.mu.Lock()
	c.reads[akid]++
	fail, hook := c.failing[akid], c.hook
	c.mu.Unlock()
	if hook != nil {
		hook(ctx, akid)
	}
	if fail {
		return fencegate.S3Credential{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "the registry cannot be asked")
	}
	return c.S3Credentials.LookupS3(ctx, akid)
}

// fail makes the reads of akids fail (or succeed again).
func (c *countedCreds) fail(on bool, akids ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, k := range akids {
		c.failing[k] = on
	}
}

// readsOf is how often each of akids was read.
func (c *countedCreds) readsOf(akids []string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int, len(akids))
	for i, k := range akids {
		out[i] = c.reads[k]
	}
	return out
}

// crowded is a front door where the identity owner is at its bound of open
// uploads (MaxOpenUploadsPerIdentity) over leases akids, each lease's first
// upload (first) with a part of 1 MiB staged; its clock is clock's, and
// every credential read goes through creds, which counts the reads from
// the end of crowd on (those the leases' own requests made are left out).
type crowded struct {
	e     *env
	srv   *s3door.Server
	creds *countedCreds
	clock atomic.Pointer[time.Time]
	akids []string
	first []*mpu
}

func crowd(t *testing.T, leases int, modes *gateway.Modes) *crowded {
	t.Helper()
	c := &crowded{}
	now := time.Now()
	c.clock.Store(&now)
	c.e = newEnvModes(t, nil, false, func() time.Time { return *c.clock.Load() }, func(s *s3door.Server) {
		c.creds = &countedCreds{S3Credentials: s.Credentials, reads: map[string]int{}, failing: map[string]bool{}}
		s.Credentials, c.srv = c.creds, s
	}, modes)
	per, more := s3door.MaxOpenUploadsPerIdentity/leases, s3door.MaxOpenUploadsPerIdentity%leases
	for l := range leases {
		akid := fmt.Sprintf("AKIDE%02d", l)
		cl := c.e.client(c.e.lease(akid, owner, "b/r"))
		c.akids = append(c.akids, akid)
		c.first = append(c.first, begin(t, cl, "r/k"))
		c.first[l].mustPart(1, 1<<20, 'p')
		n := per
		if l < more {
			n++
		}
		for range n - 1 {
			begin(t, cl, "r/k")
		}
	}
	c.creds.mu.Lock()
	clear(c.creds.reads) // from here on, the leases' reads are the front door's own
	c.creds.mu.Unlock()
	return c
}

// advance moves the front door's clock by d.
func (c *crowded) advance(d time.Duration) {
	next := c.clock.Load().Add(d)
	c.clock.Store(&next)
}

// end makes lease l's credential resolve as state, as the registry answers
// for a lease that ended.
func (c *crowded) end(l int, state fencegate.StatusState) {
	cred := c.e.creds[c.akids[l]]
	cred.State = state
	c.e.creds[c.akids[l]] = cred
}

// staging is what the front door stages: upload directories, part files,
// and what the staging budget holds in all and for owner.
type staging struct {
	dirs, files int
	all, mine   int64
}

func (c *crowded) staging(t *testing.T) staging {
	t.Helper()
	if err := c.srv.StagingInStep(); err != nil {
		t.Fatal(err)
	}
	es, _ := os.ReadDir(filepath.Join(c.e.spool, "s3-uploads"))
	all, mine := c.srv.StagingHeld(owner)
	return staging{dirs: len(es), files: c.e.filesUnder("s3-uploads"), all: all, mine: mine}
}

// create is a CreateMultipartUpload of r/k by a new lease of owner.
func (c *crowded) create(akid string) error {
	_, err := c.e.client(c.e.lease(akid, owner, "b/r")).CreateMultipartUpload(context.Background(),
		&s3.CreateMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String("r/k")})
	return err
}

// refusedUnchanged checks that err is TooManyUploads and that staging is
// still before.
func (c *crowded) refusedUnchanged(t *testing.T, err error, what string, before staging) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s was accepted", what)
	}
	if code, _, _ := apiCode(t, err); code != "TooManyUploads" {
		t.Fatalf("%s: %v, want TooManyUploads", what, err)
	}
	if after := c.staging(t); after != before {
		t.Fatalf("%s changed what is staged: %+v, before %+v", what, after, before)
	}
}

// Rule: an identity at its bound of open uploads whose leases have ended
// (released, expired, or forgotten by the registry) creates again: the
// ended leases' uploads go as an abort would (their parts removed, their
// staging bytes given back), logged with their access key IDs, and a live
// lease's stay, parts and all.
func TestAnIdentityAtItsBoundWhoseLeasesEndedCreatesAgain(t *testing.T) {
	c := crowd(t, 4, nil)
	c.end(0, fencegate.StateReleased)
	c.end(1, fencegate.StateExpired)
	delete(c.e.creds, c.akids[2]) // the registry forgot the lease
	var log bytes.Buffer
	c.srv.Log = slog.New(slog.NewTextHandler(&log, nil))
	if err := c.create("AKIDNEW"); err != nil {
		t.Fatalf("a create with the identity's other leases ended: %v", err)
	}
	if want := "uploads=192 access_key_ids=\"[AKIDE00 AKIDE01 AKIDE02]\""; !strings.Contains(log.String(), want) {
		t.Fatalf("the log of the discarded uploads: %q, want it to say %s", log.String(), want)
	}
	// Lease 3's 64 uploads and the new one; lease 3's part alone.
	if got, want := c.staging(t), (staging{dirs: 65, files: 1, all: 1 << 20, mine: 1 << 20}); got != want {
		t.Fatalf("staging after the ended leases' uploads went: %+v, want %+v", got, want)
	}
	f := c.first[0]
	_, err := f.c.AbortMultipartUpload(context.Background(), &s3.AbortMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String(f.key), UploadId: f.id})
	if code, _, _ := apiCode(t, err); code != "NoSuchUpload" {
		t.Fatalf("the ended lease's abort of its discarded upload: %v, want NoSuchUpload (as after the idle sweep)", err)
	}
	live := c.first[3]
	lp, err := live.c.ListParts(context.Background(), &s3.ListPartsInput{Bucket: aws.String("b"), Key: aws.String(live.key), UploadId: live.id})
	if err != nil || len(lp.Parts) != 1 {
		t.Fatalf("the live lease's upload: %+v %v, want its part", lp, err)
	}
}

// Rule: the uploads of a lease still HELD keep counting: the create is
// refused as before and nothing staged changes.
func TestALiveLeasesUploadsKeepCounting(t *testing.T) {
	c := crowd(t, 4, nil)
	before := c.staging(t)
	c.refusedUnchanged(t, c.create("AKIDNEW"), "a create with the identity's leases live", before)
	if got := c.creds.readsOf(c.akids); fmt.Sprint(got) != "[1 1 1 1]" {
		t.Fatalf("reads of the live leases: %v, want each once", got)
	}
	f := c.first[0]
	if lp, err := f.c.ListParts(context.Background(), &s3.ListPartsInput{Bucket: aws.String("b"), Key: aws.String(f.key), UploadId: f.id}); err != nil || len(lp.Parts) != 1 {
		t.Fatalf("a live lease's upload after the refusal: %+v %v, want its part", lp, err)
	}
}

// Rule: a lease whose status cannot be read keeps its uploads, ended or
// not, and ends the create's reads: the create is refused as before after
// one read, nothing staged changes; once they can be read, they go.
func TestAStatusReadErrorKeepsTheRefusal(t *testing.T) {
	c := crowd(t, 4, nil)
	for l := range c.akids {
		c.end(l, fencegate.StateReleased)
	}
	c.creds.fail(true, c.akids...)
	before := c.staging(t)
	c.refusedUnchanged(t, c.create("AKIDNEW"), "a create while the leases cannot be read", before)
	if got := c.creds.readsOf(c.akids); fmt.Sprint(got) != "[1 0 0 0]" {
		t.Fatalf("reads while the registry cannot be asked: %v, want the first failed read to end them", got)
	}
	c.creds.fail(false, c.akids...)
	if err := c.create("AKIDNEW"); err != nil {
		t.Fatalf("a create once the ended leases can be read: %v", err)
	}
	if got, want := c.staging(t), (staging{dirs: 1}); got != want {
		t.Fatalf("staging: %+v, want %+v", got, want)
	}
}

// Rule: one refused create reads at most 16 leases, each once; a lease read
// HELD is not read again for a minute; the next refusal reads those not
// read yet; after the minute they are read again, and one that ended then
// gives way.
func TestStatusReadsAreBoundedPerRefusal(t *testing.T) {
	c := crowd(t, 17, nil)
	total := func() (n int, most int) {
		for _, r := range c.creds.readsOf(c.akids) {
			n, most = n+r, max(most, r)
		}
		return n, most
	}
	before := c.staging(t)
	c.refusedUnchanged(t, c.create("AKIDNEW"), "the first create at the bound", before)
	if n, most := total(); n != 16 || most != 1 {
		t.Fatalf("the first refusal read %d leases, one %d times; want 16, each once", n, most)
	}
	c.advance(time.Second)
	c.refusedUnchanged(t, c.create("AKIDNEW"), "the second create", before)
	if n, most := total(); n != 17 || most != 1 {
		t.Fatalf("after the second refusal %d reads, one lease %d times; want the 17th lease read, each once", n, most)
	}
	c.refusedUnchanged(t, c.create("AKIDNEW"), "a create within a minute", before)
	if n, _ := total(); n != 17 {
		t.Fatalf("a refusal within a minute of the reads read again: %d reads, want 17", n)
	}
	c.advance(s3door.StatusRecheck)
	c.end(0, fencegate.StateReleased)
	if err := c.create("AKIDNEW"); err != nil {
		t.Fatalf("a create once a lease read a minute ago ended: %v", err)
	}
	if n, most := total(); n != 33 || most != 2 {
		t.Fatalf("reads: %d, one lease %d times; want 33, none more than twice", n, most)
	}
}

// Rule: the uploads of ended leases on a resource in shadow mode, where an
// ended lease still stages and completes, keep counting; a lease read ended
// is not read again (it never holds again), and its uploads go once its
// resource is enforced.
func TestEndedLeasesUploadsInShadowModeKeepCounting(t *testing.T) {
	modes, err := gateway.NewModes(gateway.ModeRule{Pattern: "b/r", Mode: gateway.Shadow})
	if err != nil {
		t.Fatal(err)
	}
	c := crowd(t, 4, modes)
	for l := range c.akids {
		c.end(l, fencegate.StateExpired)
	}
	before := c.staging(t)
	c.refusedUnchanged(t, c.create("AKIDNEW"), "a create in shadow mode", before)
	c.advance(s3door.StatusRecheck)
	c.refusedUnchanged(t, c.create("AKIDNEW"), "a create in shadow mode a minute later", before)
	if got := c.creds.readsOf(c.akids); fmt.Sprint(got) != "[1 1 1 1]" {
		t.Fatalf("reads of the ended leases: %v, want each once", got)
	}
	if err := modes.Set("b/r", gateway.Enforce, false); err != nil {
		t.Fatal(err)
	}
	if err := c.create("AKIDNEW"); err != nil {
		t.Fatalf("a create once the resource is enforced: %v", err)
	}
	if got := c.creds.readsOf(c.akids); fmt.Sprint(got) != "[1 1 1 1]" {
		t.Fatalf("reads of the leases known ended: %v, want no more", got)
	}
	if got, want := c.staging(t), (staging{dirs: 1}); got != want {
		t.Fatalf("staging: %+v, want %+v", got, want)
	}
}

// Rule: a create refused for want of room is let in when room appeared
// while the leases in its way were read (another upload aborted or
// completed meanwhile), though none of them ended.
func TestRoomMadeMeanwhileLetsTheCreateIn(t *testing.T) {
	c := crowd(t, 4, nil)
	var once atomic.Bool
	c.creds.hook = func(_ context.Context, akid string) {
		if akid != c.akids[0] || !once.CompareAndSwap(false, true) {
			return
		}
		f := c.first[3] // a live lease aborts one of its uploads
		if _, err := f.c.AbortMultipartUpload(context.Background(), &s3.AbortMultipartUploadInput{Bucket: aws.String("b"), Key: aws.String(f.key), UploadId: f.id}); err != nil {
			t.Errorf("the live lease's abort: %v", err)
		}
	}
	if err := c.create("AKIDNEW"); err != nil {
		t.Fatalf("a create once an upload in its way was aborted meanwhile: %v", err)
	}
	if got, want := c.staging(t), (staging{dirs: 256, files: 3, all: 3 << 20, mine: 3 << 20}); got != want {
		t.Fatalf("staging: %+v, want %+v (the live leases' uploads less the aborted one, and the new one)", got, want)
	}
}

// Rule: the reads of one create at a bound stop once its budget is spent: a
// lease whose read takes the whole budget is the last read, the create is
// refused as before and nothing staged changes.
func TestStatusReadsStopOnceTheirBudgetIsSpent(t *testing.T) {
	c := crowd(t, 4, nil)
	c.srv.SetStatusBudget(50 * time.Millisecond)
	giveUp := make(chan struct{})
	defer close(giveUp)
	c.creds.hook = func(ctx context.Context, akid string) {
		if akid == c.akids[0] { // answered (HELD) only once the budget is spent
			select {
			case <-ctx.Done():
			case <-giveUp:
			}
		}
	}
	before := c.staging(t)
	refused := make(chan error, 1)
	go func() { refused <- c.create("AKIDNEW") }()
	select {
	case err := <-refused:
		c.refusedUnchanged(t, err, "a create whose first read took the budget", before)
	case <-time.After(20 * time.Second):
		t.Fatal("a create whose first read hangs did not end")
	}
	if got := c.creds.readsOf(c.akids); fmt.Sprint(got) != "[1 0 0 0]" {
		t.Fatalf("reads: %v, want none after the budget was spent", got)
	}
}

// Rule: creates refused together read each lease in their way once between
// them: a lease one of them is reading is not read by the other, which
// waits for that read and counts again after it: with the leases HELD both
// are refused, with them ended both are let in.
func TestCreatesRefusedTogetherReadEachLeaseOnce(t *testing.T) {
	for _, ended := range []bool{false, true} {
		t.Run(fmt.Sprintf("ended=%v", ended), func(t *testing.T) {
			c := crowd(t, 4, nil)
			if ended {
				for l := range c.akids {
					c.end(l, fencegate.StateReleased)
				}
			}
			started, waiting, gate := make(chan string, 8), make(chan struct{}, 8), make(chan struct{})
			open := sync.OnceFunc(func() { close(gate) })
			defer open() // a failing test lets the first create's read end too
			c.creds.hook = func(_ context.Context, akid string) {
				if akid[:5] == "AKIDE" { // a lease in the way; held until the second create waits
					started <- akid
					<-gate
				}
			}
			c.srv.OnAwaitReads(func() { waiting <- struct{}{} })
			before := c.staging(t)
			first, second := make(chan error, 1), make(chan error, 1)
			go func() { first <- c.create("AKIDNEW1") }()
			<-started
			go func() { second <- c.create("AKIDNEW2") }()
			select {
			case <-waiting: // the second create found leases in its way being read
			case err := <-second:
				t.Fatalf("the second create did not wait for the first's reads: %v", err)
			}
			open()
			for _, r := range []struct {
				what string
				err  error
			}{{"the first create", <-first}, {"the second create", <-second}} {
				if ended && r.err != nil {
					t.Fatalf("%s with the leases in its way ended: %v", r.what, r.err)
				}
				if !ended {
					c.refusedUnchanged(t, r.err, r.what, before)
				}
			}
			if got := c.creds.readsOf(c.akids); fmt.Sprint(got) != "[1 1 1 1]" {
				t.Fatalf("reads of the leases in the way: %v, want each once between the two creates", got)
			}
		})
	}
}

// Rule: a lease read REVOKED is not taken to have ended for good (a paused
// registry reads every lease REVOKED): it is read again after a minute, as
// one read HELD, and once it reads HELD again its uploads stay.
func TestALeaseReadRevokedIsReadAgain(t *testing.T) {
	modes, err := gateway.NewModes(gateway.ModeRule{Pattern: "b/r", Mode: gateway.Shadow})
	if err != nil {
		t.Fatal(err)
	}
	c := crowd(t, 4, modes) // shadow mode: the uploads of leases read REVOKED stay
	for l := range c.akids {
		c.end(l, fencegate.StateRevoked)
	}
	before := c.staging(t)
	c.refusedUnchanged(t, c.create("AKIDNEW"), "a create with the leases read REVOKED", before)
	c.refusedUnchanged(t, c.create("AKIDNEW"), "a create within the minute", before)
	if got := c.creds.readsOf(c.akids); fmt.Sprint(got) != "[1 1 1 1]" {
		t.Fatalf("reads within the minute: %v, want each once", got)
	}
	for l := range c.akids {
		c.end(l, fencegate.StateHeld) // the registry grants again
	}
	if err := modes.Set("b/r", gateway.Enforce, false); err != nil {
		t.Fatal(err)
	}
	c.advance(s3door.StatusRecheck)
	c.refusedUnchanged(t, c.create("AKIDNEW"), "a create once the leases read HELD again", before)
	if got := c.creds.readsOf(c.akids); fmt.Sprint(got) != "[2 2 2 2]" {
		t.Fatalf("reads after the minute: %v, want each read again", got)
	}
}

// Rule: the leases read before a read that fails count: an ended one's
// uploads go and the create is let in if that made room; the failed lease
// and those after it are not read, and a later ended one keeps its uploads
// until a later create reads it, which tries the failed lease after those
// not tried yet (a lease whose read keeps failing hides no other).
func TestReadsBeforeAFailedReadCount(t *testing.T) {
	c := crowd(t, 4, nil)
	c.end(0, fencegate.StateReleased)
	c.creds.fail(true, c.akids[1])
	c.end(2, fencegate.StateReleased)
	if err := c.create("AKIDNEW"); err != nil {
		t.Fatalf("a create with the lease read before the failed one ended: %v", err)
	}
	if got := c.creds.readsOf(c.akids); fmt.Sprint(got) != "[1 1 0 0]" {
		t.Fatalf("reads: %v, want the ended lease's and the failed one's only", got)
	}
	// Lease 0's 64 uploads went; leases 1 to 3's stay (lease 2's though ended), with the new one.
	if got, want := c.staging(t), (staging{dirs: 193, files: 3, all: 3 << 20, mine: 3 << 20}); got != want {
		t.Fatalf("staging: %+v, want %+v", got, want)
	}
	// Back at the bound with lease 1 still failing: the next create tries
	// it after the leases not tried yet, so lease 2, ended, gives way.
	for range s3door.MaxOpenUploads - 1 {
		if err := c.create("AKIDNEW"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.create("AKIDNEW2"); err != nil {
		t.Fatalf("a create with lease 1 failing again and lease 2 ended: %v", err)
	}
	if got := c.creds.readsOf(c.akids); fmt.Sprint(got) != "[1 2 1 1]" {
		t.Fatalf("reads: %v, want leases 2 and 3 read, then the failing lease 1 again", got)
	}
}
