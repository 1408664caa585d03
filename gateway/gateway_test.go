package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/fencestore/embedded"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

const (
	owner    = prooftest.DefaultOwner
	resource = "local/inv/7"
	key      = "inv/7"
)

// faultyStore lets a test replace Put or Head of a real local store.
type faultyStore struct {
	fencegate.ObjectStore
	mu   sync.Mutex
	put  func(ctx context.Context, req fencegate.PutRequest) (string, error)
	head func(ctx context.Context, key string) (fencegate.ObjectInfo, error)
}

func (f *faultyStore) Put(ctx context.Context, req fencegate.PutRequest) (string, error) {
	f.mu.Lock()
	p := f.put
	f.mu.Unlock()
	if p != nil {
		return p(ctx, req)
	}
	return f.ObjectStore.Put(ctx, req)
}

func (f *faultyStore) Head(ctx context.Context, key string) (fencegate.ObjectInfo, error) {
	f.mu.Lock()
	h := f.head
	f.mu.Unlock()
	if h != nil {
		return h(ctx, key)
	}
	return f.ObjectStore.Head(ctx, key)
}

func (f *faultyStore) set(put func(context.Context, fencegate.PutRequest) (string, error), head func(context.Context, string) (fencegate.ObjectInfo, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.put, f.head = put, head
}

// timeOut makes every Put and Head fail as a timeout (BACKEND_UNAVAILABLE),
// so nobody can tell whether a write landed.
func (f *faultyStore) timeOut() {
	f.set(func(context.Context, fencegate.PutRequest) (string, error) {
		return "", fencegate.Errorf(fencegate.CodeBackendUnavailable, "timeout")
	}, func(context.Context, string) (fencegate.ObjectInfo, error) {
		return fencegate.ObjectInfo{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "timeout")
	})
}

type fixture struct {
	t     *testing.T
	kit   *prooftest.Kit
	store fencegate.FenceStore
	obj   *faultyStore
	gw    *gateway.Gateway
	modes *gateway.Modes // shadowFixture's
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	kit := prooftest.New(t)
	st, err := embedded.Open(filepath.Join(t.TempDir(), "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	loc, err := local.New("local", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: st, Now: kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, kit: kit, store: st, obj: &faultyStore{ObjectStore: loc}, gw: gw}
}

// request builds a fenced object write of body under fence and segment.
func (f *fixture) request(fence, seg uint64, body string) gateway.Request {
	f.t.Helper()
	tok, vg := f.kit.VerifiedGrant(func(g *fencegate.Grant) {
		g.Resource, g.FenceToken = resource, fence
		g.Lease, g.OperationRoot = "lease-"+strconv.FormatUint(fence, 10), "root-"+strconv.FormatUint(fence, 10)
	})
	return gateway.Request{
		Caller: owner, GrantToken: tok, StatusToken: f.kit.Status(vg, nil), Segment: seg,
		Resource: resource, Target: fencegate.ObjectTarget("local", key), Method: "PUT",
		PayloadDigest: "sha256:" + body,
		Effect:        gateway.ObjectPut{Store: f.obj, Key: key, Body: strings.NewReader(body), Size: int64(len(body))},
	}
}

func (f *fixture) content() string {
	f.t.Helper()
	rc, _, err := f.obj.Get(context.Background(), key)
	if err != nil {
		return ""
	}
	defer rc.Close()
	b, _ := io.ReadAll(rc)
	return string(b)
}

func TestOwnEarlierWriteBehindAPreconditionFailureBecomesItsReceipt(t *testing.T) {
	f := newFixture(t)
	// The write lands, but its answer is lost and the retry meets 412.
	f.obj.set(func(ctx context.Context, req fencegate.PutRequest) (string, error) {
		if _, err := f.obj.ObjectStore.Put(ctx, req); err != nil {
			return "", err
		}
		return "", &fencegate.Error{Code: fencegate.CodeBackendConflict, Message: "412", Err: fencegate.ErrPreconditionFailed}
	}, nil)
	res, err := f.gw.Apply(context.Background(), f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := f.obj.Head(context.Background(), key)
	if res.Receipt.State != fencegate.ReceiptCommitted || res.Receipt.Version != info.ETag {
		t.Fatalf("receipt %+v, object etag %s", res.Receipt, info.ETag)
	}
}

func TestChangeBehindTheGatewaysBackIsBackendConflict(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.gw.Apply(ctx, f.request(5, 1, "v1")); err != nil {
		t.Fatal(err)
	}
	info, _ := f.obj.Head(ctx, key)
	if _, err := f.obj.ObjectStore.Put(ctx, fencegate.PutRequest{Key: key, Body: strings.NewReader("outside"), Size: 7, IfMatch: info.ETag}); err != nil {
		t.Fatal(err)
	}
	_, err := f.gw.Apply(ctx, f.request(5, 2, "v2"))
	if fencegate.ErrorCode(err) != fencegate.CodeBackendConflict {
		t.Fatalf("want BACKEND_CONFLICT, got %v", err)
	}
	if got := f.content(); got != "outside" {
		t.Fatalf("object overwritten: %q", got)
	}
	rs, _ := f.store.Resource(ctx, resource)
	if rs.LastSegmentSeq != 1 || rs.PendingReceipt != "" {
		t.Fatalf("a failed effect kept its segment or the resource busy: %+v", rs)
	}
}

func TestUncertainEffectIsUnknownBlocksTheResourceAndIsReconciled(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.gw.Apply(ctx, f.request(5, 1, "v1")); err != nil {
		t.Fatal(err)
	}
	// The write lands but the connection drops, and the read-back fails too.
	f.obj.set(func(ctx context.Context, req fencegate.PutRequest) (string, error) {
		_, _ = f.obj.ObjectStore.Put(ctx, req)
		return "", fencegate.Errorf(fencegate.CodeBackendUnavailable, "connection reset")
	}, func(context.Context, string) (fencegate.ObjectInfo, error) {
		return fencegate.ObjectInfo{}, fencegate.Errorf(fencegate.CodeBackendUnavailable, "connection reset")
	})
	res, err := f.gw.Apply(ctx, f.request(5, 2, "v2"))
	var fe *fencegate.Error
	if !errors.As(err, &fe) || fe.Code != fencegate.CodeMutationUnknown || fe.ReceiptID == "" {
		t.Fatalf("want MUTATION_UNKNOWN with a receipt, got %v", err)
	}
	f.obj.set(nil, nil)
	// Nothing new is admitted while the outcome is unknown, not even a higher fence.
	if _, err := f.gw.Apply(ctx, f.request(6, 1, "v3")); fencegate.ErrorCode(err) != fencegate.CodeResourceBusy {
		t.Fatalf("want RESOURCE_BUSY, got %v", err)
	}
	rc := &gateway.Reconciler{Store: f.store, Now: f.kit.Now, Resolver: func(string) gateway.Resolver {
		return gateway.ObjectResolver{Stores: map[string]fencegate.ObjectStore{"local": f.obj}, Now: f.kit.Now, EffectTimeout: time.Minute, Grace: time.Minute}
	}}
	if n, err := rc.RunOnce(ctx); err != nil || n != 1 {
		t.Fatalf("reconciled %d, %v", n, err)
	}
	got, _ := f.store.Receipt(ctx, res.Receipt.ID)
	if got.State != fencegate.ReceiptCommitted {
		t.Fatalf("receipt %s after reconcile", got.State)
	}
	if _, err := f.gw.Apply(ctx, f.request(6, 1, "v3")); err != nil {
		t.Fatalf("resource still blocked after reconcile: %v", err)
	}
}

// TestWriteThatNeverLandedIsNotAppliedOnlyGraceAfterItsExpiry: the effect's
// requests carry their expiry (effectTimeout after admission) to the store,
// and the reconciler calls the write NOT_APPLIED only once that expiry, the
// store's rounding (LandBySlack) and the grace have passed: before, the
// request may still be in the network and land.
func TestWriteThatNeverLandedIsNotAppliedOnlyGraceAfterItsExpiry(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var landBy time.Time
	f.obj.set(func(ctx context.Context, _ fencegate.PutRequest) (string, error) {
		landBy, _ = fencegate.LandBy(ctx)
		return "", fencegate.Errorf(fencegate.CodeBackendUnavailable, "timeout")
	}, nil)
	res, err := f.gw.Apply(ctx, f.request(5, 1, "v1"))
	if fencegate.ErrorCode(err) != fencegate.CodeMutationUnknown {
		t.Fatalf("want MUTATION_UNKNOWN, got %v", err)
	}
	if want := res.Receipt.CreatedAt.Add(time.Minute); !landBy.Equal(want) {
		t.Fatalf("the write's landing deadline %v, want effectTimeout after admission %v", landBy, want)
	}
	f.obj.set(nil, nil)
	reconciler := func() *gateway.Reconciler {
		return &gateway.Reconciler{Store: f.store, Now: f.kit.Now, Resolver: func(string) gateway.Resolver {
			return gateway.ObjectResolver{Stores: map[string]fencegate.ObjectStore{"local": f.obj}, Now: f.kit.Now, EffectTimeout: time.Minute, Grace: time.Minute}
		}}
	}
	settleable := res.Receipt.CreatedAt.Add(time.Minute + fencegate.LandBySlack + time.Minute)
	f.kit.Advance(settleable.Sub(f.kit.Now()) - time.Millisecond)
	if n, _ := reconciler().RunOnce(ctx); n != 0 {
		t.Fatal("settled while the write could still land (before expiry + slack + grace)")
	}
	if got, _ := f.store.Receipt(ctx, res.Receipt.ID); got.State != fencegate.ReceiptUnknown {
		t.Fatalf("receipt %s before the grace ran out, want UNKNOWN", got.State)
	}
	f.kit.Advance(time.Millisecond)
	if n, _ := reconciler().RunOnce(ctx); n != 1 {
		t.Fatal("not settled once expiry + slack + grace had passed")
	}
	got, _ := f.store.Receipt(ctx, res.Receipt.ID)
	if got.State != fencegate.ReceiptNotApplied {
		t.Fatalf("receipt %s, want NOT_APPLIED", got.State)
	}
	// The segment can be written again: the effect is known not to have happened.
	if _, err := f.gw.Apply(ctx, f.request(5, 1, "v1")); err != nil {
		t.Fatalf("retry of a not-applied segment: %v", err)
	}
}

func TestOrphanedPendingReceiptIsSettledFromObjectMetadata(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// A gateway crashed between the object write and the receipt commit.
	req := f.request(5, 1, "v1")
	vg, _, err := f.gw.Authorize(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	adm, err := f.store.Admit(ctx, fencegate.AdmitRequest{Grant: vg, Segment: 1, Target: req.Target, Method: "PUT",
		PayloadDigest: req.PayloadDigest, ReceiptID: "rcpt_crashed", Now: f.kit.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.obj.Put(ctx, fencegate.PutRequest{Key: key, Body: bytes.NewReader([]byte("v1")), Size: 2, IfNoneMatch: true,
		Meta: gateway.EffectMetaOf(adm.Receipt)}); err != nil {
		t.Fatal(err)
	}
	rc := &gateway.Reconciler{Store: f.store, Now: f.kit.Now, Orphan: time.Minute, Resolver: func(string) gateway.Resolver {
		return gateway.ObjectResolver{Stores: map[string]fencegate.ObjectStore{"local": f.obj}, Now: f.kit.Now, EffectTimeout: time.Minute, Grace: time.Minute}
	}}
	if n, _ := rc.RunOnce(ctx); n != 0 {
		t.Fatal("a young PENDING receipt was taken as orphaned")
	}
	f.kit.Advance(2 * time.Minute)
	if n, _ := rc.RunOnce(ctx); n != 1 {
		t.Fatal("orphaned receipt not settled")
	}
	got, _ := f.store.Receipt(ctx, "rcpt_crashed")
	if got.State != fencegate.ReceiptCommitted || got.Version == "" {
		t.Fatalf("receipt %+v", got)
	}
}

func TestHigherFenceWaitsForTheLowerEffectToSettle(t *testing.T) {
	f := newFixture(t)
	if _, err := f.gw.Apply(context.Background(), f.request(5, 1, "v1")); err != nil {
		t.Fatal(err)
	}
	queued := func() bool { return gateway.LockHolders(f.gw, resource) == 2 } // the higher fence waits for the lock
	if got := lowThenHigh(t, f, f.gw, f.request(5, 2, "v2"), f.gw, queued); got != "low-start,low-end,high-start prev=v-low" {
		t.Fatalf("effect order %s", got)
	}
}

// lowThenHigh starts a slow effect through low, then a higher fence's first
// write through high while it is in flight, and once waiting reports that
// the higher one is held up (it must not overtake), lets the slow effect
// end; it returns the effect events.
func lowThenHigh(t *testing.T, f *fixture, low *gateway.Gateway, slow gateway.Request, high *gateway.Gateway, waiting func() bool) string {
	t.Helper()
	ctx := context.Background()
	var (
		mu     sync.Mutex
		events []string
	)
	log := func(s string) { mu.Lock(); events = append(events, s); mu.Unlock() }
	entered, release := make(chan struct{}), make(chan struct{})
	slow.Effect = gateway.EffectFunc(func(ctx context.Context, r fencegate.Receipt, prev string) (fencegate.Outcome, error) {
		log("low-start")
		close(entered)
		<-release
		log("low-end")
		return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v-low"}, nil
	})
	next := f.request(6, 1, "high")
	next.Effect = gateway.EffectFunc(func(ctx context.Context, r fencegate.Receipt, prev string) (fencegate.Outcome, error) {
		log("high-start prev=" + prev)
		return fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v-high"}, nil
	})
	done := make(chan error, 2)
	go func() { _, err := low.Apply(ctx, slow); done <- err }()
	<-entered
	go func() { _, err := high.Apply(ctx, next); done <- err }()
	deadline := time.After(10 * time.Second)
	for !waiting() {
		select {
		case err := <-done:
			t.Fatalf("a write ended while the lower fence's effect was in flight (%v): %v", err, events)
		case <-deadline:
			t.Fatal("the higher fence's write never waited for the lower one's effect")
		default:
			runtime.Gosched()
		}
	}
	close(release)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	return strings.Join(events, ",")
}

func (f *fixture) gatewayOver(st fencegate.FenceStore) *gateway.Gateway {
	f.t.Helper()
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: st, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}})
	if err != nil {
		f.t.Fatal(err)
	}
	return gw
}

// storedState is the resource row and every receipt of the resource.
func (f *fixture) storedState() string {
	f.t.Helper()
	return stateOf(f.t, f.store, resource)
}

// stateOf is res's row (or the error reading it) and every receipt of res
// in st, for comparing before and after.
func stateOf(t *testing.T, st fencegate.FenceStore, res string) string {
	t.Helper()
	rs, rerr := st.Resource(context.Background(), res)
	page, err := st.ReceiptsByResource(context.Background(), res, fencegate.Page{})
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%+v %v %+v", rs, fencegate.ErrorCode(rerr), page.Receipts)
}

func TestReplicaWaitsForAnotherReplicasEffectToSettle(t *testing.T) {
	f := newFixture(t)
	var polls atomic.Int32
	other, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1},
		// Counted: once it waits to poll again, it has found the resource
		// busy with the other replica's effect (it must not go ahead).
		After: func(d time.Duration) <-chan time.Time {
			polls.Add(1)
			return time.After(d)
		}})
	if err != nil {
		t.Fatal(err)
	}
	// The second gateway shares only the store, like another replica.
	polled := func() bool { return polls.Load() >= 1 }
	if got := lowThenHigh(t, f, f.gw, f.request(5, 1, "low"), other, polled); got != "low-start,low-end,high-start prev=v-low" {
		t.Fatalf("effect order %s", got)
	}
}

// countingQuerier is a query-mode status source that says HELD and counts.
type countingQuerier struct{ n int }

func (q *countingQuerier) GrantStatus(_ context.Context, g fencegate.VerifiedGrant) (fencegate.Status, error) {
	q.n++
	return fencegate.Status{GrantDigest: g.Digest, Resource: g.Resource, Lease: g.Lease, FenceToken: g.FenceToken,
		State: fencegate.StateHeld, IssuerEpoch: g.IssuerEpoch}, nil
}

func TestQueryModeAsksTheRegistryOncePerWrite(t *testing.T) {
	f := newFixture(t)
	q := &countingQuerier{}
	gw, err := gateway.New(gateway.Config{Verifier: f.kit.Verifier(), Querier: q, Store: f.store, Now: f.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}})
	if err != nil {
		t.Fatal(err)
	}
	req := f.request(5, 1, "v1")
	req.StatusToken = ""
	if err := gw.Precheck(context.Background(), req); err != nil || q.n != 0 {
		t.Fatalf("precheck: %v, %d queries", err, q.n)
	}
	if _, err := gw.Apply(context.Background(), req); err != nil || q.n != 1 {
		t.Fatalf("apply: %v, %d queries", err, q.n)
	}
}

func TestReconcilerRaisesUnknownsPastTheDeadline(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.unknownWrite(t)
	var raised []fencegate.Receipt
	rc := &gateway.Reconciler{Store: f.store, Now: f.kit.Now, Deadline: 15 * time.Minute,
		OnOverdue: func(o []fencegate.Receipt) { raised = o },
		Resolver: func(string) gateway.Resolver {
			return gateway.ResolverFunc(func(context.Context, fencegate.Receipt) (fencegate.Outcome, error) {
				return fencegate.Outcome{State: fencegate.ReceiptUnknown}, nil // the effect cannot be queried
			})
		}}
	if _, err := rc.RunOnce(ctx); err != nil || len(raised) != 0 {
		t.Fatalf("raised before the deadline: %v %v", raised, err)
	}
	f.kit.Advance(16 * time.Minute)
	if _, err := rc.RunOnce(ctx); err != nil || len(raised) != 1 {
		t.Fatalf("not raised past the deadline: %v %v", raised, err)
	}
	f.kit.Advance(time.Second) // in backoff now, and still raised
	if _, err := rc.RunOnce(ctx); err != nil || len(raised) != 1 {
		t.Fatalf("a receipt in backoff fell off the overdue list: %v %v", raised, err)
	}
	if od, _ := rc.Overdue(ctx); len(od) != 1 {
		t.Fatalf("Overdue = %v", od)
	}
}

// slowAdmits is a fence store whose Admit commits `delay` after it was asked
// (on the test clock): a commit that waited for locks or a slow disk.
type slowAdmits struct {
	fencegate.FenceStore
	advance func()
}

func (s slowAdmits) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	adm, err := s.FenceStore.Admit(ctx, req)
	s.advance()
	return adm, err
}

// TestEffectEndsAtItsExpiryHoweverLongTheAdmissionTook: the receipt's
// creation time is taken before the admission's transaction, which may
// commit much later (lock waits, group commit, a slow disk). The effect's
// requests expire at the store effectTimeout after that creation time, and
// the reconciler's grace (and reconcile.orphan > effectTimeout) is counted
// from it too, so the gateway's own effect (a body still streaming through
// its connection, an API call in flight) must end by then as well, not
// effectTimeout after the slow commit returned.
func TestEffectEndsAtItsExpiryHoweverLongTheAdmissionTook(t *testing.T) {
	kit := prooftest.New(t)
	st, err := embedded.Open(filepath.Join(t.TempDir(), "fence.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	loc, err := local.New("local", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const effectTimeout = time.Minute
	slow := slowAdmits{FenceStore: st, advance: func() { kit.Advance(40 * time.Second) }}
	gw, err := gateway.New(gateway.Config{Verifier: kit.Verifier(), Store: slow, Now: kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, EffectTimeout: effectTimeout})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, kit: kit, store: st, obj: &faultyStore{ObjectStore: loc}, gw: gw}
	var left time.Duration
	f.obj.set(func(ctx context.Context, req fencegate.PutRequest) (string, error) {
		dl, ok := ctx.Deadline()
		if !ok {
			t.Error("the effect has no deadline")
		}
		left = time.Until(dl)
		return loc.Put(ctx, req)
	}, nil)
	res, err := f.gw.Apply(context.Background(), f.request(5, 1, "v1"))
	if err != nil {
		t.Fatal(err)
	}
	expiry := gateway.EffectExpiry(res.Receipt, effectTimeout)
	if want := expiry.Sub(kit.Now()); left > want || left < want-5*time.Second {
		t.Fatalf("the effect had %v left, want at most what remained to its expiry (%v), effectTimeout after the receipt's creation", left, want)
	}
}
