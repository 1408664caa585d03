package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencegate/fencegate/domain"
)

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// waitDone waits for ctx's cancellation, which the lease's watcher delivers
// as soon as Lost closes; the bound only turns a bug into a failure.
func waitDone(t *testing.T, ctx context.Context) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lease's context was not cancelled")
	}
}

// A worker paused past the TTL learns it the moment the state machine runs
// again: Lost closes and the lease's context is cancelled with a
// LEASE_NOT_HELD cause, before any request is sent.
func TestPausePastTheTTLClosesLostAndCancelsTheLeaseContext(t *testing.T) {
	f, l := held(t)
	ctx, cancel := l.Context(context.Background())
	defer cancel()
	lost := l.Lost()
	f.clock.Advance(ttl / 4)
	_ = l.Tick(ctx)
	if closed(lost) || ctx.Err() != nil {
		t.Fatal("lost while the lease is held")
	}
	f.clock.Advance(ttl) // the process was paused
	_ = l.Tick(context.Background())
	if !closed(lost) {
		t.Fatal("Lost is open after the pause")
	}
	waitDone(t, ctx)
	cause := context.Cause(ctx)
	if domain.ErrorCode(cause) != domain.CodeLeaseNotHeld || !errors.Is(cause, errDeadline) {
		t.Fatalf("cause %v", cause)
	}
	if f.count("renew")+f.count("write") != 0 {
		t.Fatal("requests were sent")
	}
}

// A context taken from a lease that no longer allows effects is cancelled
// at once; one taken after recovery lives again.
func TestConfirmedRenewalAfterUnknownOpensAFreshLostChannel(t *testing.T) {
	f, l := held(t)
	f.loseNext("renew")
	f.clock.Advance(ttl / 3)
	_ = l.Tick(context.Background())
	wantState(t, l, StateOwnershipUnknown)
	old := l.Lost()
	if !closed(old) {
		t.Fatal("Lost is open while ownership is unknown")
	}
	ctx, cancel := l.Context(context.Background())
	waitDone(t, ctx)
	cancel()
	if err := l.Tick(context.Background()); err != nil {
		t.Fatalf("recovering renewal: %v", err)
	}
	wantState(t, l, StateHeld)
	if closed(l.Lost()) || !closed(old) {
		t.Fatal("after recovery Lost must be a fresh open channel, and the old one stay closed")
	}
	ctx, cancel = l.Context(context.Background())
	defer cancel()
	if ctx.Err() != nil {
		t.Fatal("a context of a held lease is cancelled")
	}
}

func TestReleaseAndLostFenceCloseLost(t *testing.T) {
	_, l := held(t)
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !closed(l.Lost()) {
		t.Fatal("released, Lost open")
	}
	f, l2 := held(t)
	f.refuseNext("write", domain.CodeStaleOwner)
	_, err := l2.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), "")
	wantCode(t, err, domain.CodeStaleOwner)
	if !closed(l2.Lost()) {
		t.Fatal("STALE_OWNER, Lost open")
	}
}

// OnStateChange sees every transition, in order, with its cause, and may
// read the lease (it runs without the lease's lock).
func TestOnStateChangeReportsEveryTransitionInOrder(t *testing.T) {
	f, c := newFake(t)
	var got []string
	var l *Lease
	p := params("")
	p.OnStateChange = func(from, to State, cause error) {
		if l != nil && l.State() != to { // no deadlock, and no later change yet
			got = append(got, "state mismatch")
		}
		got = append(got, fmt.Sprintf("%s>%s:%s", from, to, domain.ErrorCode(cause)))
	}
	l, err := c.NewLease(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := l.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(ttl / 3)
	if err := l.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(ttl + time.Second)
	_ = l.Tick(ctx)
	f.refuseNext("renew", domain.CodeLeaseNotHeld)
	_ = l.Tick(ctx)
	want := []string{
		"REQUESTED>HELD:", "HELD>RENEWING:", "RENEWING>HELD:",
		"HELD>OWNERSHIP_UNKNOWN:LEASE_NOT_HELD", "OWNERSHIP_UNKNOWN>EXPIRED:LEASE_NOT_HELD",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("transitions\n got %v\nwant %v", got, want)
	}
}

// Rule: OnStateChange never runs under the commit's lock: a change a
// commit makes (STALE_OWNER ending the lease) is reported after the commit
// ends, so the callback may read NextSegment or write. It used to run with
// the commit lock held, and such a callback hung every later write of the lease.
func TestOnStateChangeOfACommitMayUseTheLease(t *testing.T) {
	f, c := newFake(t)
	var l *Lease
	var next []uint64
	p := params("")
	p.OnStateChange = func(from, to State, cause error) {
		if to == StateLost {
			next = append(next, l.NextSegment())
		}
	}
	l, err := c.AcquireLease(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	f.refuseNext("write", domain.CodeStaleOwner)
	done := make(chan error, 1)
	go func() {
		_, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), "")
		done <- err
	}()
	select {
	case err := <-done:
		wantCode(t, err, domain.CodeStaleOwner)
	case <-time.After(10 * time.Second): // a deadlock, not a timing bound
		t.Fatal("the write hung: OnStateChange ran under the commit's lock")
	}
	if len(next) != 1 || next[0] != 1 {
		t.Fatalf("callback saw NextSegment %v, want [1] once", next)
	}
}

// Rule (DESIGN §8, an uncertain renewal is OWNERSHIP_UNKNOWN): a renewal
// that reached the registry and was cut short by its context's deadline
// (fencectl run gives each one a third of the TTL) went unanswered in time:
// the lease is OWNERSHIP_UNKNOWN, Lost closes and no further write is sent.
// Only the caller's own cancellation leaves it HELD; a deadline that had
// passed before anything was sent changes nothing.
func TestATimedOutRenewalIsOwnershipUnknown(t *testing.T) {
	f, l := held(t)
	lost := l.Lost()
	f.clock.Advance(ttl / 2) // past the renewal point, before the deadline
	past := newDeadlineCtx()
	past.expire()
	if err := l.Tick(past); !errors.Is(err, context.DeadlineExceeded) || f.count("renew") != 0 {
		t.Fatalf("a renewal whose deadline had passed: %v, %d sent", err, f.count("renew"))
	}
	wantState(t, l, StateHeld)

	g := f.hold("renew")
	var once sync.Once
	release := func() { once.Do(func() { close(g.release) }) }
	defer release()
	ctx := newDeadlineCtx()
	done := make(chan error, 1)
	go func() { done <- l.Tick(ctx) }()
	<-g.entered // the renewal reached the registry
	ctx.expire()
	err := <-done
	release()
	if !IsUncertain(err) {
		t.Fatalf("the timed-out renewal answered %v, want an uncertain error", err)
	}
	wantStoppedAfterUncertain(t, f, l, lost, "a timed-out renewal")
}

// wantStoppedAfterUncertain checks a lease after an uncertain answer (what):
// OWNERSHIP_UNKNOWN, Lost closed, a new write refused locally, and no write
// sent at all.
func wantStoppedAfterUncertain(t *testing.T, f *fakeGateway, l *Lease, lost <-chan struct{}, what string) {
	t.Helper()
	wantState(t, l, StateOwnershipUnknown)
	if !closed(lost) {
		t.Fatalf("Lost still open after %s", what)
	}
	_, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), "")
	wantCode(t, err, domain.CodeLeaseNotHeld)
	if n := f.count("write"); n != 0 {
		t.Fatalf("%d writes sent after %s", n, what)
	}
}

// Rule (DESIGN §8, an uncertain status answer is OWNERSHIP_UNKNOWN): a
// status check that reached the registry and was cut short by the write's
// context deadline is OWNERSHIP_UNKNOWN: that write and every later one are
// refused locally, and none is sent.
func TestATimedOutStatusCheckIsOwnershipUnknown(t *testing.T) {
	f, l := held(t)
	lost := l.Lost()
	g := f.hold("status")
	var once sync.Once
	release := func() { once.Do(func() { close(g.release) }) }
	defer release()
	f.clock.Advance(statusLife) // the proof needs a refresh before the next write
	ctx := newDeadlineCtx()
	done := make(chan error, 1)
	go func() {
		_, err := l.Objects("bucket").Put(ctx, "jobs/a", strings.NewReader("x"), "")
		done <- err
	}()
	<-g.entered // the status check reached the registry
	ctx.expire()
	err := <-done
	release()
	if err == nil {
		t.Fatal("the write whose status check timed out succeeded")
	}
	wantStoppedAfterUncertain(t, f, l, lost, "a timed-out status check")
}

// Rule: `defer lease.Release(ctx)` means no more effects: Release refuses
// new effects at once, then waits for a write in flight to be answered
// before it sends the release and returns; a Release whose context ends
// while it waits returns at once and sends nothing (it never hangs on a
// commit). Run in a synctest bubble with the fake in process, so that
// synctest.Wait says when Release has either returned or is waiting.
func TestReleaseReturnsOnlyAfterTheWriteInFlightIsAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f, c := newInProcessFake(t)
		l, err := c.AcquireLease(context.Background(), params(""))
		if err != nil {
			t.Fatal(err)
		}
		g := f.hold("write")
		var once sync.Once
		release := func() { once.Do(func() { close(g.release) }) }
		defer release()
		put := make(chan error, 1)
		go func() {
			_, err := l.Objects("bucket").Put(context.Background(), "jobs/a", strings.NewReader("x"), "")
			put <- err
		}()
		<-g.entered // the write is at the gateway
		released := make(chan error, 1)
		go func() { released <- l.Release(context.Background()) }()
		synctest.Wait() // Release has returned, or waits
		select {
		case err := <-released:
			t.Fatalf("Release returned (%v) while a write was in flight", err)
		default:
		}
		if n := f.count("release"); n != 0 {
			t.Fatalf("%d releases sent while a write was in flight", n)
		}
		wantState(t, l, StateReleased) // no new effect from the moment it was called

		bounded, cancel := context.WithCancel(context.Background())
		cancel()
		if err := l.Release(bounded); !errors.Is(err, context.Canceled) {
			t.Fatalf("a Release whose context ended while a write was in flight: %v, want context.Canceled", err)
		}

		release() // the gateway answers the write
		if err := <-put; err != nil {
			t.Fatalf("the write in flight: %v", err)
		}
		if err := <-released; err != nil {
			t.Fatalf("release: %v", err)
		}
		_, err = l.Objects("bucket").Put(context.Background(), "jobs/b", strings.NewReader("y"), "")
		wantCode(t, err, domain.CodeLeaseNotHeld)
		if f.count("release") != 1 || f.count("write") != 1 {
			t.Fatalf("%d releases, %d writes; want 1 and 1", f.count("release"), f.count("write"))
		}
	})
}
