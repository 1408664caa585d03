package gateway_test

import (
	"context"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// stageLog records, in order, what the admissions and the stager did.
type stageLog struct {
	mu     sync.Mutex
	events []string
	staged chan struct{} // closed at the first Stage
	once   sync.Once
}

func (l *stageLog) add(e string) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *stageLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.events, ",")
}

func (l *stageLog) count(e string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, x := range l.events {
		if x == e {
			n++
		}
	}
	return n
}

// loggedStager is the local store, its stagings logged.
type loggedStager struct {
	*local.Store
	log *stageLog
	// failAfterRead: a staging reads the whole body, then fails.
	failAfterRead bool
	// panicAfterRead: a staging reads half the body, then panics.
	panicAfterRead bool
}

func (s loggedStager) Stage(ctx context.Context, req fencegate.PutRequest) (fencegate.StagedPut, error) {
	s.log.add("stage")
	if s.panicAfterRead {
		_, _ = io.CopyN(io.Discard, req.Body, req.Size/2)
		s.log.once.Do(func() { close(s.log.staged) })
		panic("test: a staging panics halfway through the body")
	}
	if s.failAfterRead {
		_, _ = io.Copy(io.Discard, req.Body)
		s.log.once.Do(func() { close(s.log.staged) })
		return nil, fencegate.Errorf(fencegate.CodeBackendUnavailable, "staging failed after reading the body")
	}
	sp, err := s.Store.Stage(ctx, req)
	s.log.once.Do(func() { close(s.log.staged) })
	if err != nil {
		return nil, err
	}
	return loggedStaged{sp, s.log, new(atomic.Bool)}, nil
}

type loggedStaged struct {
	fencegate.StagedPut
	log *stageLog
	put *atomic.Bool // Put was called: a Discard after it does nothing, and is not logged
}

func (s loggedStaged) Put(ctx context.Context, ifMatch string, ifNoneMatch bool) (string, error) {
	s.put.Store(true)
	s.log.add("publish")
	return s.StagedPut.Put(ctx, ifMatch, ifNoneMatch)
}

func (s loggedStaged) Discard() {
	if !s.put.Load() {
		s.log.add("discard")
	}
	s.StagedPut.Discard()
}

// loggedAdmits logs each admission's end; with waitStage, an admission
// first waits (bounded) for a staging to have begun, which it does only
// when the staging runs beside it.
type loggedAdmits struct {
	fencegate.FenceStore
	log       *stageLog
	waitStage bool
	hold      chan struct{} // non-nil: admissions of resource "local/held" wait for it
	// rewrite, when set, changes each admitted receipt as answered.
	rewrite func(*fencegate.Receipt)
	// panicAt: an admission of this resource panics (after its staging began).
	panicAt string
}

func (s *loggedAdmits) Admit(ctx context.Context, req fencegate.AdmitRequest) (fencegate.Admission, error) {
	if s.waitStage {
		select {
		case <-s.log.staged:
		case <-time.After(10 * time.Second):
			s.log.add("no-staging-beside-the-admission")
		}
	}
	if s.hold != nil && req.Grant.Resource == "local/held" {
		<-s.hold
	}
	if req.Grant.Resource == s.panicAt {
		<-s.log.staged
		panic("admission panics")
	}
	adm, err := s.FenceStore.Admit(ctx, req)
	if err != nil {
		s.log.add("refused")
	} else {
		s.log.add("admitted")
		if s.rewrite != nil {
			s.rewrite(&adm.Receipt)
		}
	}
	return adm, err
}

// stagedOutcomes counts what the gateway tells its observer of stagings.
type stagedOutcomes struct {
	gateway.NopObserver
	log        *stageLog
	panicOnUse *atomic.Bool // set: the observation of a used staging panics (after use, before publish)
}

func (o stagedOutcomes) Staged(outcome string) {
	o.log.add("observed-" + outcome)
	if outcome == "used" && o.panicOnUse.Load() {
		panic("panic between the staging's use and its publish")
	}
}

type stageFixture struct {
	t     *testing.T
	kit   *prooftest.Kit
	log   *stageLog
	fence *loggedAdmits
	obj   loggedStager
	gw    *gateway.Gateway
	// panicOnUse: the gateway panics right after handing a staging to its effect.
	panicOnUse *atomic.Bool
}

func newStageFixture(t *testing.T, modes *gateway.Modes) *stageFixture {
	t.Helper()
	base := newFixture(t) // its proof kit, embedded fence store and local store
	log := &stageLog{staged: make(chan struct{})}
	fence := &loggedAdmits{FenceStore: base.store, log: log}
	panicOnUse := new(atomic.Bool)
	gw, err := gateway.New(gateway.Config{Verifier: base.kit.Verifier(), Store: fence, Now: base.kit.Now,
		Policy: gateway.StaticPolicy{Generation: 1}, Modes: modes, Observe: stagedOutcomes{log: log, panicOnUse: panicOnUse}})
	if err != nil {
		t.Fatal(err)
	}
	return &stageFixture{t: t, kit: base.kit, log: log, fence: fence,
		obj: loggedStager{Store: base.obj.ObjectStore.(*local.Store), log: log}, gw: gw, panicOnUse: panicOnUse}
}

// put writes body to res's object under fence and segment.
func (f *stageFixture) put(res string, fence, seg uint64, body string) (gateway.Result, error) {
	f.t.Helper()
	tok, vg := f.kit.VerifiedGrant(func(g *fencegate.Grant) {
		g.Resource, g.FenceToken = res, fence
		g.Lease, g.OperationRoot = "lease-"+res, "root-"+res
	})
	k := strings.TrimPrefix(res, "local/")
	return f.gw.Apply(context.Background(), gateway.Request{
		Caller: owner, GrantToken: tok, StatusToken: f.kit.Status(vg, nil), Segment: seg,
		Resource: res, Target: fencegate.ObjectTarget("local", k), Method: "PUT", PayloadDigest: "sha256:" + body,
		Effect: gateway.ObjectPut{Store: f.obj, Key: k, Body: strings.NewReader(body), Size: int64(len(body))},
	})
}

func (f *stageFixture) object(k string) string {
	f.t.Helper()
	body, _, err := readObject(f.obj.Store, k)
	if err != nil {
		return "<" + string(fencegate.ErrorCode(err)) + ">"
	}
	return body
}

func readObject(s fencegate.ObjectStore, k string) (string, fencegate.ObjectInfo, error) {
	rc, info, err := s.Get(context.Background(), k)
	if err != nil {
		return "", info, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), info, err
}

// TestAStagedWriteIsPublishedOnlyAfterItsAdmission: the write's bytes are
// staged beside the admission (the admission waits for the staging to
// begin), and the object changes only after the admission: the fencing
// order holds.
func TestAStagedWriteIsPublishedOnlyAfterItsAdmission(t *testing.T) {
	f := newStageFixture(t, nil)
	f.fence.waitStage = true
	res, err := f.put("local/st/1", 1, 1, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if got := f.log.String(); got != "stage,admitted,observed-used,publish" {
		t.Fatalf("events %q; want stage,admitted,observed-used,publish", got)
	}
	if res.Receipt.State != fencegate.ReceiptCommitted || f.object("st/1") != "hello" {
		t.Fatalf("receipt %s, object %q; want COMMITTED, hello", res.Receipt.State, f.object("st/1"))
	}
	_, info, _ := readObject(f.obj.Store, "st/1")
	if m, ok := fencegate.ParseEffectMeta(info.Metadata); !ok || m.ReceiptID != res.Receipt.ID || info.ETag != res.Receipt.Version {
		t.Fatalf("object metadata %v, ETag %s; want receipt %s at its version %s", info.Metadata, info.ETag, res.Receipt.ID, res.Receipt.Version)
	}
}

// TestARefusedWriteDiscardsItsStagingAndTheNextIsNotStaged: a stale write
// is refused with the object and the fence store unchanged, what it staged
// is discarded, and the resource's next writes are not staged until one
// is admitted there again (a retry loop stages once).
func TestARefusedWriteDiscardsItsStagingAndTheNextIsNotStaged(t *testing.T) {
	f := newStageFixture(t, nil)
	if _, err := f.put("local/st/2", 2, 1, "new"); err != nil {
		t.Fatal(err)
	}
	before := stateOf(t, f.fence, "local/st/2")
	for range 3 {
		_, err := f.put("local/st/2", 1, 1, "stale")
		if fencegate.ErrorCode(err) != fencegate.CodeStaleOwner {
			t.Fatalf("stale write: %v; want STALE_OWNER", err)
		}
	}
	if f.log.count("stage") != 2 || f.log.count("discard") != 1 || f.log.count("refused") != 3 || f.log.count("publish") != 1 {
		t.Fatalf("events %q; want one staging for the three refusals, discarded", f.log)
	}
	if f.object("st/2") != "new" || stateOf(t, f.fence, "local/st/2") != before {
		t.Fatalf("after the refusals object %q, state %s; want new, %s", f.object("st/2"), stateOf(t, f.fence, "local/st/2"), before)
	}
	if _, err := f.put("local/st/2", 2, 2, "newer"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.put("local/st/2", 2, 3, "newest"); err != nil {
		t.Fatal(err)
	}
	if n := f.log.count("stage"); n != 3 || f.object("st/2") != "newest" {
		t.Fatalf("%d stagings, object %q; want 3 (the first, one stale, the one after the accepted write), newest", n, f.object("st/2"))
	}
	if f.log.count("observed-used") != 2 || f.log.count("observed-discarded") != 1 {
		t.Fatalf("observed %s; want two stagings used and one discarded", f.log)
	}
}

// TestAReplayedSegmentDiscardsItsStaging: a retried segment is answered
// from its receipt; what it staged is discarded, the object is the first
// attempt's, and further retries are not staged.
func TestAReplayedSegmentDiscardsItsStaging(t *testing.T) {
	f := newStageFixture(t, nil)
	first, err := f.put("local/st/3", 1, 1, "once")
	if err != nil {
		t.Fatal(err)
	}
	before := stateOf(t, f.fence, "local/st/3")
	for range 3 {
		again, err := f.put("local/st/3", 1, 1, "once")
		if err != nil || again.Receipt.ID != first.Receipt.ID {
			t.Fatalf("replay: %+v %v; want receipt %s", again.Receipt, err, first.Receipt.ID)
		}
	}
	if f.log.count("stage") != 2 || f.log.count("discard") != 1 || f.log.count("publish") != 1 {
		t.Fatalf("events %q; want two stagings (the first replay's discarded, the next not staged)", f.log)
	}
	_, info, _ := readObject(f.obj.Store, "st/3")
	if info.ETag != first.Receipt.Version || stateOf(t, f.fence, "local/st/3") != before {
		t.Fatalf("object ETag %s, state %s; want the first write's %s, %s", info.ETag, stateOf(t, f.fence, "local/st/3"), first.Receipt.Version, before)
	}
}

// TestAWriteIsNotStagedBesideAnotherInFlight: with another write of the
// process between admission and answer, a write is not staged (its sync
// would slow the other's commit as much as it saves) and lands as before.
func TestAWriteIsNotStagedBesideAnotherInFlight(t *testing.T) {
	f := newStageFixture(t, nil)
	f.fence.hold = make(chan struct{})
	done := make(chan error, 1)
	go func() { _, err := f.put("local/held", 1, 1, "slow"); done <- err }()
	select { // the held write's staging, which starts before its admission
	case <-f.log.staged:
	case <-time.After(10 * time.Second):
		t.Fatal("the held write was not staged")
	}
	if _, err := f.put("local/st/4", 1, 1, "beside"); err != nil {
		t.Fatal(err)
	}
	close(f.fence.hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := f.log.count("stage"); n != 1 || f.object("st/4") != "beside" || f.object("held") != "slow" {
		t.Fatalf("%d stagings (%s), objects %q %q; want 1 (the held write's), beside, slow", n, f.log, f.object("st/4"), f.object("held"))
	}
}

// TestAShadowForwardAfterARefusalWritesTheWholeBody: a refusal in shadow
// mode still forwards the write; the staging read the body first, so it is
// rewound for the forward.
func TestAShadowForwardAfterARefusalWritesTheWholeBody(t *testing.T) {
	modes, err := gateway.NewModes(gateway.ModeRule{Pattern: "local/sh/*", Mode: gateway.Shadow})
	if err != nil {
		t.Fatal(err)
	}
	f := newStageFixture(t, modes)
	if _, err := f.put("local/sh/1", 2, 1, "owner"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.put("local/sh/1", 1, 1, "stale but shadowed"); err != nil {
		t.Fatalf("shadow forward of a stale write: %v", err)
	}
	if got := f.object("sh/1"); got != "stale but shadowed" || f.log.count("discard") != 1 {
		t.Fatalf("object %q after the shadow forward, events %s; want the whole body, one discard", got, f.log)
	}
}

// TestAWriteStagedForAnotherReceiptIsNotPublished: when the admitted
// receipt is not the one the write was staged for (its metadata would name
// another), the staging is discarded and the write made as without it,
// with the admitted receipt's metadata.
func TestAWriteStagedForAnotherReceiptIsNotPublished(t *testing.T) {
	f := newStageFixture(t, nil)
	f.fence.rewrite = func(r *fencegate.Receipt) { r.OperationID = "op-as-admitted" }
	res, err := f.put("local/st/5", 1, 1, "body")
	if err != nil {
		t.Fatal(err)
	}
	if f.log.count("stage") != 1 || f.log.count("discard") != 1 || f.log.count("publish") != 0 {
		t.Fatalf("events %q; want the staging discarded, nothing published from it", f.log)
	}
	_, info, err := readObject(f.obj.Store, "st/5")
	m, ok := fencegate.ParseEffectMeta(info.Metadata)
	if err != nil || !ok || m.OperationID != "op-as-admitted" || m.ReceiptID != res.Receipt.ID || info.ETag != res.Receipt.Version {
		t.Fatalf("object %+v (%v); want the admitted receipt's metadata at its version", info, err)
	}
}

// TestAFailedStagingLeavesTheWholeBodyForThePlainWrite: a staging that
// read the body and failed rewinds it, so the write made without it lands
// whole.
func TestAFailedStagingLeavesTheWholeBodyForThePlainWrite(t *testing.T) {
	f := newStageFixture(t, nil)
	f.obj.failAfterRead = true
	res, err := f.put("local/st/6", 1, 1, "every byte")
	if err != nil || res.Receipt.State != fencegate.ReceiptCommitted {
		t.Fatalf("write after a failed staging: %+v %v; want COMMITTED", res.Receipt, err)
	}
	if got := f.object("st/6"); got != "every byte" || f.log.count("stage") != 1 || f.log.count("publish") != 0 || f.log.count("observed-failed") != 1 {
		t.Fatalf("object %q, events %s; want the whole body, written without the staging, which is observed failed", got, f.log)
	}
}

// TestAPanickingStagingIsAFailedStagingAndTheWholeBodyIsWritten: a staging
// runs on a goroutine of its own, so its panic must not end the process; it
// is a failed staging (observed so), the body is rewound, and the write made
// without it lands whole.
func TestAPanickingStagingIsAFailedStagingAndTheWholeBodyIsWritten(t *testing.T) {
	f := newStageFixture(t, nil)
	f.obj.panicAfterRead = true
	res, err := f.put("local/st/7", 1, 1, "every single byte")
	if err != nil || res.Receipt.State != fencegate.ReceiptCommitted {
		t.Fatalf("write after a panicking staging: %+v %v; want COMMITTED", res.Receipt, err)
	}
	if got := f.object("st/7"); got != "every single byte" || f.log.count("stage") != 1 || f.log.count("publish") != 0 || f.log.count("observed-failed") != 1 {
		t.Fatalf("object %q, events %s; want the whole body, written without the staging, which is observed failed", got, f.log)
	}
}

// TestAPanicAfterStagingStillDiscardsIt: an admission that panics after the
// write's staging began leaves no staged spare behind (the deferred drop).
func TestAPanicAfterStagingStillDiscardsIt(t *testing.T) {
	f := newStageFixture(t, nil)
	f.fence.panicAt = "local/st/7"
	before := stateOf(t, f.fence, "local/st/7")
	mustPanic(t, func() { _, _ = f.put("local/st/7", 1, 1, "never") })
	if f.log.count("stage") != 1 || f.log.count("discard") != 1 || f.object("st/7") != "<NOT_FOUND>" || stateOf(t, f.fence, "local/st/7") != before {
		t.Fatalf("events %s, object %q, state %s; want the staging discarded, no object, no state", f.log, f.object("st/7"), stateOf(t, f.fence, "local/st/7"))
	}
}

// TestAPanicBetweenUseAndPublishStillDiscardsTheStaging: a panic after the
// staging was handed to the effect but before the effect published it
// (here: in the observer told of the use) gives the staged bytes up
// (apply's deferred drop; a Discard after a publish does nothing); the
// object is unchanged. The admission committed, so the resource's receipt
// is left PENDING, as after any crash before the effect.
func TestAPanicBetweenUseAndPublishStillDiscardsTheStaging(t *testing.T) {
	f := newStageFixture(t, nil)
	f.panicOnUse.Store(true)
	mustPanic(t, func() { _, _ = f.put("local/st/8", 1, 1, "never") })
	if f.log.count("stage") != 1 || f.log.count("publish") != 0 || f.log.count("discard") != 1 || f.object("st/8") != "<NOT_FOUND>" {
		t.Fatalf("events %s, object %q; want the staging used, then discarded, and no object", f.log, f.object("st/8"))
	}
	// And once published, the deferred drop's Discard does nothing.
	f.panicOnUse.Store(false)
	if _, err := f.put("local/st/9", 1, 1, "kept"); err != nil || f.object("st/9") != "kept" {
		t.Fatalf("a published staging: %v, object %q", err, f.object("st/9"))
	}
	if f.log.count("publish") != 1 || f.log.count("discard") != 1 || f.log.count("observed-discarded") != 0 {
		t.Fatalf("events %s: want one publish, no discard of it, nothing observed discarded", f.log)
	}
}

// mustPanic runs f and fails unless its panic reaches the caller.
func mustPanic(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatal("the panic did not reach the caller")
		}
	}()
	f()
}
