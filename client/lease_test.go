package client

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/domain"
)

func noSleep(context.Context, time.Duration) error { return nil }

const ttl = 30 * time.Second

func params(requestID string) LeaseParams {
	return LeaseParams{AcquireParams: AcquireParams{Resource: "bucket/jobs", RequestID: requestID, TTL: ttl, OperationID: "op-1"}}
}

func held(t *testing.T) (*fakeGateway, *Lease) {
	t.Helper()
	f, c := newFake(t)
	l, err := c.AcquireLease(context.Background(), params(""))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	wantState(t, l, StateHeld)
	return f, l
}

func wantState(t *testing.T, l *Lease, want State) {
	t.Helper()
	if got := l.State(); got != want {
		t.Fatalf("state %s, want %s (cause %v)", got, want, l.Err())
	}
}

func wantCode(t *testing.T, err error, want domain.Code) {
	t.Helper()
	if got := domain.ErrorCode(err); got != want {
		t.Fatalf("code %q, want %q (err %v)", got, want, err)
	}
}

func TestLostAcquisitionIsRecoveredWithTheSameRequestID(t *testing.T) {
	for _, given := range []string{"req-given", ""} {
		f, c := newFake(t)
		f.loseNext("acquire")
		l, err := c.AcquireLease(context.Background(), params(given))
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		wantState(t, l, StateHeld)
		if len(f.requestIDs) != 2 || f.requestIDs[0] != f.requestIDs[1] || f.requestIDs[0] != l.RequestID() {
			t.Fatalf("server saw request IDs %q, want the lease's %q twice", f.requestIDs, l.RequestID())
		}
		if given != "" && l.RequestID() != given {
			t.Fatalf("request ID %q, want the caller's %q", l.RequestID(), given)
		}
		if l.Fence() != 7 || l.Grant() != "grant-7" || l.ID() != "L1" {
			t.Fatalf("lease %+v", l.Info())
		}
	}
}

func TestAcquisitionStillUnansweredStaysRequestedAndKeepsItsIdentity(t *testing.T) {
	f, c := newFake(t)
	for range 5 {
		f.loseNext("acquire")
	}
	l, err := c.AcquireLease(context.Background(), params(""))
	if !IsUncertain(err) {
		t.Fatalf("want an uncertain error, got %v", err)
	}
	wantState(t, l, StateRequested)
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatalf("second acquire: %v", err)
	}
	wantState(t, l, StateHeld)
	for _, id := range f.requestIDs {
		if id != l.RequestID() {
			t.Fatalf("request IDs %q: a new identity was used", f.requestIDs)
		}
	}
}

func TestRefusedAcquisitionIsReturnedAsTheServersCode(t *testing.T) {
	f, c := newFake(t)
	f.refuseNext("acquire", domain.CodeLeaseHeld)
	l, err := c.AcquireLease(context.Background(), params(""))
	wantCode(t, err, domain.CodeLeaseHeld)
	wantState(t, l, StateRequested)
	if f.count("acquire") != 1 {
		t.Fatalf("a definite refusal was retried %d times", f.count("acquire"))
	}
}

func TestRenewalHappensAtAThirdOfTheTTL(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	f.clock.Advance(ttl/3 - time.Second)
	if err := l.Tick(ctx); err != nil || f.count("renew") != 0 {
		t.Fatalf("renewed early: err %v, renewals %d", err, f.count("renew"))
	}
	before := l.Deadline()
	f.clock.Advance(time.Second)
	if err := l.Tick(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	wantState(t, l, StateHeld)
	if f.count("renew") != 1 || !l.Deadline().After(before) {
		t.Fatalf("renewals %d, deadline %v -> %v", f.count("renew"), before, l.Deadline())
	}
}

func TestRenewingStillAllowsEffects(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	g := f.hold("renew")
	f.clock.Advance(ttl / 3)
	done := make(chan error, 1)
	go func() { done <- l.Tick(ctx) }()
	<-g.entered
	released := false
	defer func() {
		if !released {
			close(g.release)
		}
	}()
	wantState(t, l, StateRenewing)
	if _, err := l.Objects("bucket").Put(ctx, "jobs/a", strings.NewReader("x"), ""); err != nil {
		t.Fatalf("put while renewing: %v", err)
	}
	if err := l.Tick(ctx); err != nil || f.count("renew") != 1 {
		t.Fatalf("a second renewal was started: %v", err)
	}
	close(g.release)
	released = true
	if err := <-done; err != nil {
		t.Fatalf("renew: %v", err)
	}
	wantState(t, l, StateHeld)
}

func TestUncertainRenewalBlocksNewEffects(t *testing.T) {
	f, l := held(t)
	ctx := context.Background()
	f.loseNext("renew")
	f.clock.Advance(ttl / 3)
	if err := l.Tick(ctx); !IsUncertain(err) {
		t.Fatalf("want an uncertain renewal, got %v", err)
	}
	wantState(t, l, StateOwnershipUnknown)
	_, err := l.Objects("bucket").Put(ctx, "jobs/a", strings.NewReader("x"), "")
	wantCode(t, err, domain.CodeLeaseNotHeld)
	_, err = l.API("payments").Call(ctx, "POST", "charges", []byte("{}"), "application/json")
	wantCode(t, err, domain.CodeLeaseNotHeld)
	if n := f.count("write"); n != 0 {
		t.Fatalf("%d effects sent while ownership was unknown", n)
	}
	// A confirmed renewal is the way back.
	if err := l.Tick(ctx); err != nil {
		t.Fatalf("recovering renewal: %v", err)
	}
	wantState(t, l, StateHeld)
	if _, err := l.Objects("bucket").Put(ctx, "jobs/a", strings.NewReader("x"), ""); err != nil {
		t.Fatalf("put after recovery: %v", err)
	}
}

// Rule: a renewal the caller itself cancelled says nothing about the lease
// (as in Refresh): the lease stays HELD, bounded by its local deadline, and
// Lost stays open. A worker stopping Run mid-renewal used to cancel every
// lease.Context.
func TestARenewalTheCallerCancelledKeepsTheLeaseHeld(t *testing.T) {
	f, l := held(t)
	f.clock.Advance(ttl / 2) // past the renewal point, before the deadline
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Tick(ctx); err == nil {
		t.Fatal("a renewal with a cancelled context answered nil")
	}
	wantState(t, l, StateHeld)
	select {
	case <-l.Lost():
		t.Fatal("Lost closed by the caller's own cancellation")
	default:
	}
	// The local deadline still bounds it, and the next Tick renews.
	if err := l.Tick(context.Background()); err != nil {
		t.Fatalf("the next renewal: %v", err)
	}
	wantState(t, l, StateHeld)
	f.clock.Advance(ttl + time.Second)
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	_ = l.Tick(ctx)
	wantState(t, l, StateOwnershipUnknown)
}

func TestRenewalAnsweredNotHeldIsExpired(t *testing.T) {
	f, l := held(t)
	f.refuseNext("renew", domain.CodeLeaseNotHeld)
	f.clock.Advance(ttl / 3)
	wantCode(t, l.Tick(context.Background()), domain.CodeLeaseNotHeld)
	wantState(t, l, StateExpired)
	if err := l.Tick(context.Background()); err != nil || f.count("renew") != 1 {
		t.Fatalf("a terminal lease was renewed again: %v, %d", err, f.count("renew"))
	}
}

func TestStatusAnsweredExpiredIsExpired(t *testing.T) {
	f, l := held(t)
	f.mu.Lock()
	f.state = domain.StateExpired
	f.mu.Unlock()
	f.clock.Advance(statusLife) // the proof needs a refresh before the next write
	_, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), "")
	wantCode(t, err, domain.CodeLeaseNotHeld)
	wantState(t, l, StateExpired)
	if f.count("write") != 0 {
		t.Fatal("a write was sent for an expired lease")
	}
}

func TestUncertainStatusAnswerIsOwnershipUnknown(t *testing.T) {
	f, l := held(t)
	f.loseNext("status")
	f.loseNext("status") // net/http retries an idempotent GET once on a reused connection
	f.clock.Advance(statusLife)
	_, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), "")
	if !IsUncertain(err) {
		t.Fatalf("want the uncertain status error, got %v", err)
	}
	wantState(t, l, StateOwnershipUnknown)
	if f.count("write") != 0 {
		t.Fatal("a write was sent with ownership unknown")
	}
}

func TestReleaseIsReleased(t *testing.T) {
	f, l := held(t)
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	wantState(t, l, StateReleased)
	if f.count("release") != 1 {
		t.Fatalf("releases sent: %d", f.count("release"))
	}
	_, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), "")
	wantCode(t, err, domain.CodeLeaseNotHeld)
	if f.count("write") != 0 {
		t.Fatal("a write was sent after release")
	}
}

func TestPausePastTheTTLIsOwnershipUnknownNotExpired(t *testing.T) {
	f, l := held(t)
	f.clock.Advance(ttl + time.Second) // the process was paused
	if err := l.Tick(context.Background()); err != nil {
		t.Fatalf("tick: %v", err)
	}
	wantState(t, l, StateOwnershipUnknown)
	if f.count("renew")+f.count("status") != 0 {
		t.Fatal("the tick that noticed the pause asked the registry")
	}
	_, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), "")
	wantCode(t, err, domain.CodeLeaseNotHeld)
	if f.count("write") != 0 {
		t.Fatal("a write was sent after the pause")
	}
	// Only the registry confirms expiry.
	f.refuseNext("renew", domain.CodeLeaseNotHeld)
	_ = l.Tick(context.Background())
	wantState(t, l, StateExpired)
}

func TestWriterNoticesAPauseWithoutATick(t *testing.T) {
	f, l := held(t)
	f.clock.Advance(ttl)
	_, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), "")
	wantCode(t, err, domain.CodeLeaseNotHeld)
	wantState(t, l, StateOwnershipUnknown)
	if f.count("write")+f.count("status") != 0 {
		t.Fatal("requests were sent after the local deadline")
	}
}

func TestRunStopsWhenTheLeaseIsTerminal(t *testing.T) {
	_, l := held(t)
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Run(context.Background()); err != nil {
		t.Fatalf("run after release: %v", err)
	}
}

func TestProofLifeIsReadFromTheStatusProof(t *testing.T) {
	// {"iat":1000,"exp":6000}
	life, ok := proofLife("e30.eyJpYXQiOjEwMDAsImV4cCI6NjAwMH0.c2ln")
	if !ok || life != 5*time.Second {
		t.Fatalf("life %v ok %v", life, ok)
	}
	if _, ok := proofLife("proof-1"); ok {
		t.Fatal("an opaque proof has no readable life")
	}
}

func TestRunEndsWithItsContext(t *testing.T) {
	_, l := held(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Run(ctx); err != context.Canceled {
		t.Fatalf("run: %v", err)
	}
	wantState(t, l, StateHeld)
}

func TestS3CredentialsAskedAtAcquisitionLastThroughRenewals(t *testing.T) {
	f, c := newFake(t)
	p := params("")
	p.S3Credentials = true
	l, err := c.AcquireLease(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	want := domain.S3AccessKeys{AccessKeyID: "FGLL1", SecretAccessKey: "secret-L1"}
	if got, ok := l.S3Credentials(); !ok || got != want {
		t.Fatalf("credentials %+v, %v", got, ok)
	}
	f.clock.Advance(ttl / 2)
	if err := l.Tick(context.Background()); err != nil || f.count("renew") != 1 {
		t.Fatalf("renew: %v (%d renewals)", err, f.count("renew"))
	}
	if got, ok := l.S3Credentials(); !ok || got != want {
		t.Fatalf("credentials after a renewal %+v, %v", got, ok)
	}
	_, unasked := held(t)
	if _, ok := unasked.S3Credentials(); ok {
		t.Fatal("a lease that did not ask has credentials")
	}
}

// TestAcquireAfterARefusalCountsItsDeadlineFromItsOwnSend: the local
// deadline of a lease counts from the first send that may have acquired it.
// A definite refusal (LEASE_HELD) acquired nothing, so acquiring again 45 s
// later is a lease with its whole TTL ahead, where it was born past its
// deadline (its first write refused LEASE_NOT_HELD and the lease lost).
func TestAcquireAfterARefusalCountsItsDeadlineFromItsOwnSend(t *testing.T) {
	f, c := newFake(t)
	f.refuseNext("acquire", domain.CodeLeaseHeld)
	l, err := c.AcquireLease(context.Background(), params(""))
	wantCode(t, err, domain.CodeLeaseHeld)
	f.clock.Advance(ttl + 15*time.Second) // waited for the holder to go
	if err := l.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantState(t, l, StateHeld)
	if _, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), ""); err != nil {
		t.Fatalf("first write of a lease acquired after a refusal: %v", err)
	}
}

// TestAcquireAfterAStoreFaultKeepsItsFirstSend: a store fault
// (BACKEND_UNAVAILABLE: the grant may be written, only its replication
// unconfirmed) proves nothing was granted, so the lease the same request ID
// is answered later is counted from the first send: acquired again past
// that send's TTL, it is not trusted on the registry's clock alone. It is
// confirmed by a renewal first; a renewal the registry refuses leaves it
// not held, and its first write is refused locally.
func TestAcquireAfterAStoreFaultKeepsItsFirstSend(t *testing.T) {
	f, c := newFake(t)
	f.refuseNext("acquire", domain.CodeBackendUnavailable)
	l, err := c.AcquireLease(context.Background(), params(""))
	wantCode(t, err, domain.CodeBackendUnavailable)
	f.clock.Advance(ttl + 15*time.Second)
	f.refuseNext("renew", domain.CodeLeaseNotHeld)
	_ = l.Acquire(context.Background())
	if f.count("renew") != 1 {
		t.Fatalf("%d renewals before trusting a lease whose first send is a TTL ago, want 1", f.count("renew"))
	}
	if _, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), ""); domain.ErrorCode(err) != domain.CodeLeaseNotHeld {
		t.Fatalf("first write of a lease whose renewal was refused: %v, want LEASE_NOT_HELD (refused locally)", err)
	}
	if f.count("write") != 0 {
		t.Fatalf("%d writes sent", f.count("write"))
	}
}

// acquiring starts an acquisition the fake holds (g) until released, and
// returns once it has reached the fake; done has Acquire's answer.
func acquiring(t *testing.T) (*fakeGateway, *Lease, *gate, chan error) {
	t.Helper()
	f, c := newFake(t)
	l, err := c.NewLease(params(""))
	if err != nil {
		t.Fatal(err)
	}
	g := f.hold("acquire")
	done := make(chan error, 1)
	go func() { done <- l.Acquire(context.Background()) }()
	<-g.entered
	return f, l, g, done
}

// Rule: a lease released while its acquisition is in flight stays
// RELEASED when the grant arrives, and the granted lease is released at the
// registry (not left to block the resource for its TTL).
func TestReleaseDuringAcquireStaysReleasedAndGivesTheGrantBack(t *testing.T) {
	f, l, g, done := acquiring(t)
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	err := <-done
	wantCode(t, err, domain.CodeLeaseNotHeld)
	if l.State() != StateReleased || f.count("release") != 1 {
		t.Fatalf("after the acquisition's answer: state %s, %d release requests, want RELEASED and 1", l.State(), f.count("release"))
	}
}

// Rule: a write whose own context is cancelled while the lease's proof is
// being refreshed fails alone: the lease stays HELD and Lost stays open
// (the caller's cancellation says nothing about the lease).
func TestACancelledCallerDoesNotMakeTheLeaseUnknown(t *testing.T) {
	f, l := held(t)
	l.expireProof()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Objects("bucket").Put(ctx, "jobs/a", strings.NewReader("x"), ""); err == nil {
		t.Fatal("a write with a cancelled context succeeded")
	}
	select {
	case <-l.Lost():
		t.Fatalf("one cancelled write closed Lost (state %s)", l.State())
	default:
	}
	if l.State() != StateHeld {
		t.Fatalf("state %s after one cancelled write, want HELD", l.State())
	}
	if _, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), ""); err != nil || f.count("write") != 1 {
		t.Fatalf("the next write: %v, %d writes", err, f.count("write"))
	}
}

// Rule: the local deadline holds while a renewal hangs: a Tick past it
// records OWNERSHIP_UNKNOWN and closes Lost without waiting for the
// renewal, whose confirmation still brings the lease back to HELD.
func TestAHangingRenewalDoesNotKeepLostOpenPastTheDeadline(t *testing.T) {
	f, l := held(t)
	lost := l.Lost()
	g := f.hold("renew")
	var once sync.Once
	release := func() { once.Do(func() { close(g.release) }) }
	defer release() // a failure below must not leave the fake's server waiting
	f.clock.Advance(ttl / 3)
	done := make(chan error, 1)
	go func() { done <- l.Tick(context.Background()) }()
	<-g.entered
	wantState(t, l, StateRenewing)
	f.clock.Advance(ttl)
	_ = l.Tick(context.Background())
	select {
	case <-lost:
	default:
		t.Fatalf("past the local deadline with the renewal in flight: state %s, Lost open", l.State())
	}
	wantState(t, l, StateOwnershipUnknown)
	release()
	if err := <-done; err != nil {
		t.Fatalf("the renewal's answer: %v", err)
	}
	wantState(t, l, StateHeld)
}

// Rule: an acquisition answered more than the TTL after its first send (a
// long poll) is confirmed by a renewal at once, whose send sets a deadline
// ahead: the lease is HELD with a usable deadline and its first write goes.
func TestALongPollAcquisitionAnsweredPastItsTTLIsRenewedAtOnce(t *testing.T) {
	f, l, g, done := acquiring(t)
	f.clock.Advance(ttl + time.Second)
	close(g.release)
	if err := <-done; err != nil {
		t.Fatalf("the late acquisition: %v", err)
	}
	wantState(t, l, StateHeld)
	if f.count("renew") != 1 {
		t.Fatalf("%d renewals after the late acquisition, want 1", f.count("renew"))
	}
	if _, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), ""); err != nil {
		t.Fatalf("the first write under the late acquisition: %v", err)
	}
}

// Rule: Run is inside the renewing Tick while a renewal hangs, so that Tick
// watches the local deadline itself: when its wait (the client's injected
// sleep) ends with the deadline passed, the lease is OWNERSHIP_UNKNOWN and
// Lost closes, with no other Tick.
func TestTheRenewingTickClosesLostAtTheDeadlineByItself(t *testing.T) {
	waits := make(chan chan struct{}, 4)
	sleep := func(ctx context.Context, d time.Duration) error {
		wake := make(chan struct{})
		waits <- wake
		select {
		case <-wake:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f, c := newFakeWith(t, WithSleep(sleep))
	l, err := c.AcquireLease(context.Background(), params(""))
	if err != nil {
		t.Fatal(err)
	}
	lost := l.Lost()
	g := f.hold("renew")
	var once sync.Once
	release := func() { once.Do(func() { close(g.release) }) }
	defer release()
	f.clock.Advance(ttl / 3)
	done := make(chan error, 1)
	go func() { done <- l.Tick(context.Background()) }()
	<-g.entered
	var wake chan struct{}
	select {
	case wake = <-waits: // the watchdog, waiting for the deadline
	case <-time.After(10 * time.Second): // a guard against a hang
		t.Fatal("nothing in the renewing Tick waits for the local deadline")
	}
	f.clock.Advance(ttl)
	close(wake)
	select {
	case <-lost:
	case <-time.After(10 * time.Second): // a guard against a hang, not a speed bound
		t.Fatalf("past the deadline with the renewal hanging: state %s, Lost open", l.State())
	}
	wantState(t, l, StateOwnershipUnknown)
	release()
	if err := <-done; err != nil {
		t.Fatalf("the renewal's answer: %v", err)
	}
	wantState(t, l, StateHeld)
}
