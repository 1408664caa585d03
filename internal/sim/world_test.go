package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/httpapi"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/fencestore/embedded"
	"github.com/fencegate/fencegate/fencestore/memory"
	"github.com/fencegate/fencegate/fencestore/postgres"
	"github.com/fencegate/fencegate/gateway"
	"github.com/fencegate/fencegate/internal/history"
	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/registry"
	regembedded "github.com/fencegate/fencegate/registry/embedded"
)

// config sizes one run.
type config struct {
	store     string // memory, embedded, postgres
	pgURL     string // for postgres: a fresh schema
	workers   int
	resources int // half object resources, half API resources
	gateways  int
	actions   int // per worker
	faults    bool
	// prove lets readers, busy admissions and reconcilers prove a PENDING
	// object receipt from its object at any age (-sim.prove); without it
	// only the answering process makes its deferred settle durable in time.
	prove bool
	// deferWindow is the gateways' deferred settle window; below 0 the
	// seed picks one of deferWindows (-sim.defer).
	deferWindow time.Duration
}

// world is everything one seeded run builds.
type world struct {
	t     testing.TB
	seed  uint64
	cfg   config
	rng   *rand.Rand
	clock *simClock
	s     *sched
	dir   string

	store       fencegate.FenceStore // the real store
	sp          *storeProxy
	regDB       string
	regBk       *swapBackend // the registry's backend: the bolt file's, swapped on a restore
	regDBh      *bbolt.DB
	reg         *registry.Registry
	auth        *simAuthority
	incarnation registry.Remembered // the registry's memory of its backend
	signer      []*proofs.Signer    // by epoch-1
	forger      *proofs.Signer
	bundle      *proofs.Bundle

	objects  *local.Store
	op       *objectProxy
	upstream *upstream
	api      *httpapi.API
	gws      []*gwInst
	res      []simRes

	hist  history.Recorder
	stats *stats

	// ground truth, maintained at the interception points
	admitted  map[string]*admitted // by resource
	fenceOf   map[string]string    // resource/fence -> lease admitted under it
	issuedTo  map[string]string    // resource/fence -> lease the registry issued it to
	payloadOf map[string]string    // resource/fence/segment -> payload digest admitted
	leaseExp  map[string]time.Time // latest expiry the registry granted, by lease
	holder    map[string]string    // resource -> the lease last granted it HELD
	released  map[string]bool      // leases a worker asked to release
	// restartedOnRestore: the registry was restarted on a restored copy of
	// its backend, whose lost renewals and releases its memory does not
	// cover (README, State loss): from then on one resource may be granted
	// while an earlier lease's lost renewal lives.
	restartedOnRestore bool
	inflight           map[string]int                    // forwarded effects in flight, by resource
	maxFwd             map[string]uint64                 // highest fence forwarded, by resource
	verdict            map[string]fencegate.ReceiptState // final state settled, by receipt ID
	// notApplied: API idempotency keys whose receipt settled FAILED or
	// NOT_APPLIED, until the segment is admitted again (which sends the
	// same key): the upstream must not apply one meanwhile.
	notApplied   map[string]string
	notAppliedMu sync.Mutex
	resOf        map[string]string // resource of each receipt admitted
	gathering    *storeBatch       // the batch of store calls being gathered
	// unsettled: receipts admitted and not settled final, by resource, as
	// the store committed them (kept inside the store call, since batched
	// calls run on goroutines of their own and their tasks wake later).
	unsettled   map[string]map[string]bool
	unsettledMu sync.Mutex
	// answered: every write answered COMMITTED, by receipt ID; undurable:
	// those whose settle the store did not yet hold, by resource.
	answered    map[string]*answered
	answeredIDs []string
	undurable   map[string]map[string]*answered
	deferWindow time.Duration // the gateways' Config.DeferSettle
	archive     []sent        // every request sent, for delayed replays
	delegations []delegated   // every delegation minted (worker.delegate)
	snapshot    string        // registry snapshot file, "" if none
	// failoverArmed: the next acquisition is lost by a failover that
	// happens at the renewal after it (failoverDue; worker.acquireRes and
	// worker.renew; operate arms it).
	failoverArmed, failoverDue bool
	ids                        int
	oob                        *oobState // the out-of-band writer's record (outOfBand worlds), else nil
	stopping                   bool      // workers finished: no new faults
	finished                   bool      // everything settled: background tasks end
	errs                       []string
	trace                      []string
}

type admitted struct {
	fence uint64
	seg   uint64
	lease string
}

// simRes is a resource of the run: an object resource (keys under it) or an
// API resource (one payout account).
type simRes struct {
	name string // resource ID
	api  bool
	acct string // API account
}

// gwInst is one gateway process; crash replaces it with a fresh one.
type gwInst struct {
	idx     int
	gen     int
	crashed bool
	query   bool
	g       *gateway.Gateway
	rc      *gateway.Reconciler
	busy    map[string]bool // resources with a request inside this process
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func newWorld(t testing.TB, seed uint64, cfg config, st *stats) (*world, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	clock := &simClock{now: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}
	w := &world{t: t, seed: seed, cfg: cfg, rng: rng, clock: clock, s: newSched(clock, rng), stats: st,
		admitted: map[string]*admitted{}, fenceOf: map[string]string{}, issuedTo: map[string]string{}, payloadOf: map[string]string{}, leaseExp: map[string]time.Time{},
		holder: map[string]string{}, released: map[string]bool{}, notApplied: map[string]string{},
		verdict: map[string]fencegate.ReceiptState{}, resOf: map[string]string{},
		inflight: map[string]int{}, maxFwd: map[string]uint64{}, unsettled: map[string]map[string]bool{},
		answered: map[string]*answered{}, undurable: map[string]map[string]*answered{}}
	w.deferWindow = deferWindows[seed%uint64(len(deferWindows))]
	if w.outOfBand() {
		w.oob = newOOB(seed)
	}
	if cfg.deferWindow >= 0 {
		w.deferWindow = cfg.deferWindow
	}
	base := os.TempDir()
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm" // bbolt fsyncs: keep them off the disk
	}
	dir, err := os.MkdirTemp(base, "fencegate-sim-")
	if err != nil {
		return nil, err
	}
	w.dir = dir
	for e := 1; e <= maxEpochs; e++ {
		sg, err := proofs.NewSigner([]byte(strings.Repeat(fmt.Sprint(e), 32)), fmt.Sprint("sim-", e), jwa.HS256)
		if err != nil {
			return nil, err
		}
		w.signer = append(w.signer, sg)
	}
	w.forger, _ = proofs.NewSigner([]byte(strings.Repeat("f", 32)), "sim-1", jwa.HS256)
	var keys []proofs.BundleKey
	for e, sg := range w.signer {
		keys = append(keys, sg.BundleKey(uint64(e+1)))
	}
	if w.bundle, err = proofs.NewBundle(1, keys...); err != nil {
		return nil, err
	}
	switch cfg.store {
	case "memory":
		w.store = memory.New()
	case "embedded":
		// The journal moved every 1 to 7 ops: keys read from the journal,
		// the big trees and both sides within every world.
		opts := []embedded.Option{embedded.WithJournalMoves(1 + seed%7)}
		if gatherWorld(seed) {
			opts = append(opts, embedded.WithBatchGather(storeGather, maxBatchCalls))
		}
		if w.store, err = embedded.Open(filepath.Join(dir, "fence.db"), opts...); err != nil {
			return nil, err
		}
	case "postgres":
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var opts []postgres.Option
		if gatherWorld(seed) {
			opts = append(opts, postgres.WithBatchGather(storeGather, maxBatchCalls))
		}
		if w.store, err = postgres.Open(ctx, cfg.pgURL, opts...); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown store %q", cfg.store)
	}
	w.sp = &storeProxy{FenceStore: w.store, w: w, inner: w.store}
	w.regDB = filepath.Join(dir, "registry.db")
	w.auth = &simAuthority{is: registry.Issuing{Signer: w.signer[0], Epoch: 1, PolicyGeneration: 1},
		revokedAt: map[uint64]time.Time{}, staleAt: map[uint64]time.Time{}}
	if err := w.openRegistry(); err != nil {
		return nil, err
	}
	if w.objects, err = local.New("local", filepath.Join(dir, "objects"), local.WithClock(clock.Now)); err != nil {
		return nil, err
	}
	w.op = &objectProxy{w: w, inner: w.objects}
	w.upstream = newUpstream(w)
	if w.api, err = httpapi.New(upstreamConfig, &http.Client{Transport: w.upstream}, httpapi.WithClock(clock.Now), httpapi.WithLogger(discard)); err != nil {
		return nil, err
	}
	for i := range cfg.resources {
		if i%2 == 0 {
			w.res = append(w.res, simRes{name: fmt.Sprintf("local/sim/r%d", i)})
		} else {
			acct := fmt.Sprintf("a%d", i)
			w.res = append(w.res, simRes{name: "payouts/" + acct, api: true, acct: acct})
		}
	}
	return w, nil
}

// upstreamConfig is a payments API as Stripe documents it: the idempotency
// key in a header, keys kept 24 h, a 5xx or a broken answer leaves the
// outcome open, which a resend under the same key settles.
var upstreamConfig = httpapi.APIConfig{
	Name: "payouts", BaseURL: "http://payments.sim", Timeout: 10 * time.Second,
	Contract: httpapi.Contract{Idempotency: &httpapi.Idempotency{KeyRetention: 24 * time.Hour}},
	Routes:   []httpapi.Route{{Method: "POST", Path: "/v1/accounts/{account}/payouts", Resource: "payouts/{account}"}},
}

func (w *world) close() {
	// The embedded store's group commit: ops that shared a durable commit
	// with another (the batched path the store proxy's batches reach).
	if e, ok := w.store.(*embedded.Store); ok {
		st := e.Stats()
		if st.Ops > st.Commits {
			w.stats.injectN("embedded store ops sharing a commit", int(st.Ops-st.Commits))
		}
		w.stats.injectN("embedded store journal moves", int(st.Merges))
	}
	if p, ok := w.store.(*postgres.Store); ok {
		if batches, writes := p.GroupCommits(); writes > batches {
			w.stats.injectN("postgres store writes sharing a commit", int(writes-batches))
		}
	}
	if w.store != nil {
		_ = w.store.Close()
	}
	if w.regDBh != nil {
		_ = w.regDBh.Close()
	}
	_ = os.RemoveAll(w.dir)
}

// swapBackend is the registry's lease backend, which a restore behind the
// running registry replaces under it (as a snapshot restored into a live
// Redis or etcd would be).
type swapBackend struct{ fencegate.LeaseBackend }

// openBackend (re)opens the registry's bolt file into w.regBk.
func (w *world) openBackend() error {
	db, err := bbolt.Open(w.regDB, 0o600, &bbolt.Options{NoSync: true, Timeout: time.Second})
	if err != nil {
		return err
	}
	bk, err := regembedded.New(db)
	if err != nil {
		return err
	}
	if w.regBk == nil {
		w.regBk = &swapBackend{}
	}
	w.regBk.LeaseBackend, w.regDBh = bk, db
	return nil
}

// openRegistry (re)opens the registry over the bolt file.
func (w *world) openRegistry() error {
	if err := w.openBackend(); err != nil {
		return err
	}
	bk := w.regBk
	// The registry detects a lost or rolled-back backend from its
	// incarnation marker, its memory of it (kept outside the backend, so a
	// restore does not roll it back) and the fence store's high-water mark;
	// on a loss it retires the issuing epoch.
	// Odd seeds run a registry without the check (an older deployment, a
	// backend switched without a floor), so the gateway's own defence
	// against regressed fences is exercised too.
	rc := registry.Config{Backend: bk, Authority: w.auth, Now: w.clock.Now,
		NewID: func() string { return w.newID("lease") }, MinTTL: time.Millisecond}
	if w.seed%2 == 0 {
		rc.HighWater, rc.Memory, rc.Log = w.store.(fencegate.HighWater), simMemory{w}, discard
		rc.OnLoss = func(_ context.Context, epoch uint64) error {
			// Retire the epoch signing at the loss: rotate if it still
			// signs, and it is revoked (a retry after a rotation names
			// the same epoch and must not rotate again).
			w.stats.inject("coordination state loss detected")
			if epoch != w.auth.is.Epoch {
				w.auth.revoke(epoch, w.clock.Now())
				return nil
			}
			return w.rotateNext()
		}
	}
	reg, err := registry.New(rc)
	if err != nil {
		return err
	}
	w.reg = reg
	// As the binary does before serving: compare the backend with what the
	// registry saw (a loss pauses issuance; that is no error here).
	if err := reg.Check(context.Background()); err != nil && fencegate.ErrorCode(err) != fencegate.CodeStateLost {
		return err
	}
	return nil
}

// restoresBehind: the world's registry runs its loss check (even seeds) and
// every restore of its backend happens behind it, running (seeds divisible by
// 4); other worlds with the check restart the registry on the restored file.
func (w *world) restoresBehind() bool { return w.seed%4 == 0 }

// maxEpochs bounds the key rotations of a run (operator and loss recovery).
const maxEpochs = 8

// rotateNext rotates the issuing key to the next epoch and revokes the old one.
func (w *world) rotateNext() error {
	e := w.auth.is.Epoch
	if int(e) >= len(w.signer) {
		return fmt.Errorf("no key for epoch %d", e+1)
	}
	w.auth.rotate(w.signer[e], e+1, w.clock.Now())
	return nil
}

// simMemory is the registry's memory of its backend (registry.Memory).
type simMemory struct{ w *world }

func (m simMemory) Load() (registry.Remembered, error) { return m.w.incarnation, nil }
func (m simMemory) Save(inc registry.Remembered) error { m.w.incarnation = inc; return nil }

func (w *world) newID(prefix string) string {
	w.ids++
	return fmt.Sprintf("%s_%d_%d", prefix, w.seed, w.ids)
}

// ctx keys of a request in flight.
type reqKey struct{}

// reqInfo follows one request through a gateway.
type reqInfo struct {
	gw       *gwInst
	gen      int
	resource string // the resource the request's grant claims
	admitted bool   // the store admitted it (state moved)
	forged   bool
}

func reqOf(ctx context.Context) *reqInfo {
	ri, _ := ctx.Value(reqKey{}).(*reqInfo)
	return ri
}

// crashed is the panic that unwinds a request (or reconciler pass) of a
// gateway process that crashed.
type crashed struct{}

// point is an interception point: the scheduler may run other tasks here, and
// a crash of the request's gateway may be injected here.
func (w *world) point(ctx context.Context, label string) {
	ri := reqOf(ctx)
	if ri != nil && !w.stopping && w.cfg.faults && !ri.gw.crashed && w.chance(0.004) {
		w.stats.inject("gateway crash at " + label)
		w.crash(ri.gw)
	}
	w.s.sleep(ctx, 0)
	if ri != nil && (ri.gw.crashed || ri.gw.gen != ri.gen) {
		panic(crashed{})
	}
}

// chance draws a fault with probability p (never while draining).
func (w *world) chance(p float64) bool {
	if w.stopping || !w.cfg.faults {
		return false
	}
	return w.rng.Float64() < p
}

// tracef keeps a line of the run's trace when a single seed is replayed.
func (w *world) tracef(format string, args ...any) {
	if *seedFlag >= 0 {
		w.trace = append(w.trace, w.clock.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
	}
}

func (w *world) fail(format string, args ...any) {
	w.tracef("FAIL "+format, args...)
	w.errs = append(w.errs, fmt.Sprintf("t=%s: ", w.clock.Now().Format("15:04:05.000"))+fmt.Sprintf(format, args...))
}
