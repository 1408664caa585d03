// Package etcd is the lease backend on etcd (client/v3). Every mutation is one
// etcd transaction guarded by a Compare on the ModRevision of the global
// revision key, which every mutation rewrites: a mutation commits only if no
// other mutation committed since it read its state, otherwise it re-reads and
// tries again. Mutations are therefore serialisable and linearizable (reads
// are etcd's default linearizable reads), at the price of one serialisation
// point per prefix, as in the Postgres backend.
//
// Fence source: each resource's key holds its last fence; an acquire commits
// fence = max(last, floor) + 1 in the transaction above, so fences are dense
// per resource (1, 2, 3 … as the contract requires) and use the full uint64
// range. The etcd store revision cannot be the fence itself: it is shared by
// every key on the server, so it neither starts at 1 per resource nor stays
// dense when other keys change.
//
// Time: the registry's clock decides, from ExpiresAt stored in the lease
// record. As a safety net for anything reading etcd directly, the live-lease
// key <prefix>live/<resource> is attached to an etcd lease of the lease's TTL
// (etcd may round it up to its minimum TTL); the backend never decides on it.
// Retention: a lease record no longer held and its request key are deleted
// once its expiry + retention has passed (leaserule.Forgotten;
// WithRetention, default 7 days), so a lost acquisition can be recovered by
// request ID until then; each acquisition deletes up to leaserule.PruneBatch
// of them in its transaction, as does each Prune in one of its own, found
// through an expiry index (<prefix>exp/).
// Resource keys (fence sequences), the floor, the highest fence, the
// revision and the incarnation are never deleted.
package etcd

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// DefaultPrefix is the key prefix Open uses unless WithPrefix says otherwise.
const DefaultPrefix = "/fencegate/registry/"

// maxAttempts bounds the retries of one mutation that keeps losing races.
const maxAttempts = 100

// Backend implements fencegate.LeaseBackend on etcd.
type Backend struct {
	client    *clientv3.Client
	prefix    string
	retention time.Duration
	owns      bool
}

var _ fencegate.LeaseBackend = (*Backend)(nil)

// Option configures Open.
type Option func(*config)

type config struct {
	prefix    string
	retention time.Duration
	cfg       clientv3.Config
}

// WithPrefix sets the key prefix.
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// WithConfig lets Open adjust the client configuration (TLS, auth, timeouts).
func WithConfig(f func(*clientv3.Config)) Option { return func(c *config) { f(&c.cfg) } }

// Open connects to endpoints, checks the cluster answers a linearizable read
// and indexes the lease records of a prefix written before the expiry index
// (indexExpiry); Close closes the client.
func Open(ctx context.Context, endpoints []string, opts ...Option) (*Backend, error) {
	c := config{prefix: DefaultPrefix, retention: leaserule.DefaultRetention, cfg: clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second}}
	for _, o := range opts {
		o(&c)
	}
	c.cfg.Context = context.WithoutCancel(ctx)
	client, err := clientv3.New(c.cfg)
	if err != nil {
		return nil, translate(err, "connect registry etcd")
	}
	if _, err := client.Get(ctx, c.prefix+"revision"); err != nil {
		_ = client.Close()
		return nil, translate(err, "connect registry etcd")
	}
	b := &Backend{client: client, prefix: c.prefix, retention: c.retention, owns: true}
	if err := b.indexExpiry(ctx); err != nil {
		_ = client.Close()
		return nil, translate(err, "index registry etcd lease records")
	}
	return b, nil
}

// New uses client with keys under prefix; Close leaves the client open. Of
// opts only WithRetention applies.
func New(client *clientv3.Client, prefix string, opts ...Option) *Backend {
	c := config{retention: leaserule.DefaultRetention}
	for _, o := range opts {
		o(&c)
	}
	return &Backend{client: client, prefix: prefix, retention: c.retention}
}

// Close closes the client if Open made it.
func (b *Backend) Close() error {
	if !b.owns {
		return nil
	}
	return translate(b.client.Close(), "close registry etcd")
}

// record is a lease as stored.
type record = leaserule.Record

// resource is a resource's key: its last fence and its last acquired lease.
type resource struct {
	LastFence uint64 `json:"lastFence"`
	Current   string `json:"current,omitempty"`
}

func (b *Backend) leaseKey(id string) string   { return b.prefix + "lease/" + id }
func (b *Backend) resourceKey(r string) string { return b.prefix + "res/" + r }
func (b *Backend) liveKey(r string) string     { return b.prefix + "live/" + r }
func (b *Backend) revisionKey() string         { return b.prefix + "revision" }
func (b *Backend) floorKey() string            { return b.prefix + "floor" }
func (b *Backend) requestKey(o, r string) string { // length-prefixed: no owner/request ambiguity
	return b.prefix + "req/" + strconv.Itoa(len(o)) + ":" + o + ":" + r
}

// Acquire implements fencegate.LeaseBackend.
func (b *Backend) Acquire(ctx context.Context, req fencegate.AcquireRequest) (fencegate.Lease, error) {
	if err := leaserule.CheckAcquire(req); err != nil {
		return fencegate.Lease{}, err
	}
	if err := checkTime(req.Now, req.TTL); err != nil {
		return fencegate.Lease{}, err
	}
	live := &liveLease{b: b, ttl: req.TTL}
	var out fencegate.Lease
	rk, resKey := b.requestKey(req.Owner, req.RequestID), b.resourceKey(req.Resource)
	err := b.update(ctx, []string{rk, resKey, b.floorKey(), b.leaseKey(req.LeaseID), b.incarnationKey(), b.maxFenceKey()}, func(v *view) ([]clientv3.Op, error) {
		live.attempt()
		if err := v.checkIncarnation(req.Guard); err != nil {
			return nil, err
		}
		var ops []clientv3.Op
		keep := map[string]bool{req.LeaseID: true} // records this transaction writes
		forgot := ""
		if id, ok := v.kvs[rk]; ok {
			prev, err := v.record(ctx, string(id))
			if err != nil {
				return nil, err
			}
			if !leaserule.Forgotten(prev.State, time.Unix(0, prev.ExpiresAt), req.Now, b.retention) {
				l := prev.Lease(req.Now)
				if err := leaserule.SameRequest(l, req); err != nil {
					return nil, err
				}
				out = l
				return nil, nil
			}
			// Past retention: the request ID is a new acquisition.
			ops, keep[prev.ID], forgot = append(ops, b.forget(prev)...), true, prev.ID
		}
		var res resource
		if err := v.decode(resKey, &res); err != nil {
			return nil, err
		}
		if res.Current != "" && res.Current != forgot {
			cur, err := v.record(ctx, res.Current)
			switch {
			case fencegate.ErrorCode(err) == fencegate.CodeNotFound:
				// Pruned past retention: it holds nothing.
			case err != nil:
				return nil, err
			case cur.Lease(req.Now).State == fencegate.StateHeld:
				return nil, fencegate.Errorf(fencegate.CodeLeaseHeld, "resource is held by another lease")
			case cur.State == fencegate.StateHeld: // superseded: expired for good
				cur.State = fencegate.StateExpired
				ops, keep[cur.ID] = append(ops, putJSON(b.leaseKey(cur.ID), cur)), true
			}
		}
		if _, ok := v.kvs[b.leaseKey(req.LeaseID)]; ok {
			return nil, fencegate.Errorf(fencegate.CodeBackendConflict, "lease ID already exists")
		}
		floor, err := v.uint(b.floorKey())
		if err != nil {
			return nil, err
		}
		fence, err := leaserule.NextFence(res.LastFence, floor, math.MaxUint64)
		if err != nil {
			return nil, err
		}
		rev, err := v.next()
		if err != nil {
			return nil, err
		}
		top, err := v.maxFence(ctx)
		if err != nil {
			return nil, err
		}
		liveOp, err := live.put(ctx, req.Resource, req.LeaseID)
		if err != nil {
			return nil, err
		}
		pruned, _, err := b.prune(ctx, v, req.Now, keep, map[string]bool{rk: true})
		if err != nil {
			return nil, err
		}
		rec := leaserule.NewRecord(req, fence, rev)
		out = rec.Lease(req.Now)
		ops = append(ops, pruned...)
		return append(ops, putJSON(b.leaseKey(rec.ID), rec), clientv3.OpPut(rk, rec.ID),
			clientv3.OpPut(b.expiryKey(rec.ExpiresAt, rec.ID), ""),
			putJSON(resKey, resource{LastFence: fence, Current: rec.ID}), liveOp,
			clientv3.OpPut(b.maxFenceKey(), strconv.FormatUint(max(top, fence), 10))), nil
	})
	live.done(err)
	return out, translate(err, "acquire")
}

// Renew implements fencegate.LeaseBackend. The lease keeps its TTL and
// Revision of acquisition; only ExpiresAt moves, to now+ttl.
func (b *Backend) Renew(ctx context.Context, id, owner string, ttl time.Duration, now time.Time, g fencegate.Guard) (fencegate.Lease, error) {
	if err := leaserule.CheckTTL(ttl); err != nil {
		return fencegate.Lease{}, err
	}
	if err := checkTime(now, ttl); err != nil {
		return fencegate.Lease{}, err
	}
	live := &liveLease{b: b, ttl: ttl}
	var out fencegate.Lease
	err := b.update(ctx, []string{b.leaseKey(id), b.incarnationKey()}, func(v *view) ([]clientv3.Op, error) {
		live.attempt()
		if err := v.checkIncarnation(g); err != nil {
			return nil, err
		}
		rec, err := v.record(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := leaserule.Mismatch(rec.Lease(now), owner); err != nil {
			return nil, err
		}
		if rec.Lease(now).State != fencegate.StateHeld {
			return nil, fencegate.Errorf(fencegate.CodeLeaseNotHeld, "lease %s is not held", id)
		}
		if _, err := v.next(); err != nil {
			return nil, err
		}
		liveOp, err := live.put(ctx, rec.Resource, id)
		if err != nil {
			return nil, err
		}
		ops := []clientv3.Op{liveOp}
		if exp := now.Add(ttl).UnixNano(); exp != rec.ExpiresAt {
			ops = append(ops, clientv3.OpDelete(b.expiryKey(rec.ExpiresAt, id)), clientv3.OpPut(b.expiryKey(exp, id), ""))
			rec.ExpiresAt = exp
		}
		out = rec.Lease(now)
		return append(ops, putJSON(b.leaseKey(id), rec)), nil
	})
	live.done(err)
	return out, translate(err, "renew")
}

// Release implements fencegate.LeaseBackend. A lease that is no longer held
// is returned as it is, released false. released is set by the attempt
// whose transaction commits (update may run fn again after a conflict).
func (b *Backend) Release(ctx context.Context, id, owner string, now time.Time, g fencegate.Guard) (fencegate.Lease, bool, error) {
	var out fencegate.Lease
	released := false
	err := b.update(ctx, []string{b.leaseKey(id), b.incarnationKey()}, func(v *view) ([]clientv3.Op, error) {
		released = false
		if err := v.checkIncarnation(g); err != nil {
			return nil, err
		}
		rec, err := v.record(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := leaserule.Mismatch(rec.Lease(now), owner); err != nil {
			return nil, err
		}
		if rec.Lease(now).State != fencegate.StateHeld {
			out = rec.Lease(now)
			return nil, nil
		}
		if _, err := v.next(); err != nil {
			return nil, err
		}
		rec.State = fencegate.StateReleased
		out, released = rec.Lease(now), true
		ops := []clientv3.Op{putJSON(b.leaseKey(id), rec)}
		// A HELD lease is its resource's current one: clear it.
		var res resource
		if err := v.getJSON(ctx, b.resourceKey(rec.Resource), &res); err != nil {
			return nil, err
		}
		if res.Current == id {
			res.Current = ""
			ops = append(ops, putJSON(b.resourceKey(rec.Resource), res), clientv3.OpDelete(b.liveKey(rec.Resource)))
		}
		return ops, nil
	})
	return out, released && err == nil, translate(err, "release")
}

// Lease implements fencegate.LeaseBackend with one linearizable read.
func (b *Backend) Lease(ctx context.Context, id string, now time.Time) (fencegate.Lease, error) {
	resp, err := b.client.Get(ctx, b.leaseKey(id))
	if err != nil {
		return fencegate.Lease{}, translate(err, "read lease")
	}
	if len(resp.Kvs) == 0 {
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeNotFound, "lease not found")
	}
	var rec record
	if err := decode(resp.Kvs[0].Value, &rec); err != nil {
		return fencegate.Lease{}, err
	}
	return rec.Lease(now), nil
}

// SetFloor implements fencegate.LeaseBackend. The floor only ever rises; a
// lower floor changes nothing and moves no revision.
func (b *Backend) SetFloor(ctx context.Context, floor uint64, g fencegate.Guard) error {
	if err := leaserule.CheckFloor(floor, math.MaxUint64); err != nil {
		return err
	}
	err := b.update(ctx, []string{b.floorKey(), b.incarnationKey()}, func(v *view) ([]clientv3.Op, error) {
		if err := v.checkIncarnation(g); err != nil {
			return nil, err
		}
		cur, err := v.uint(b.floorKey())
		if err != nil || floor <= cur {
			return nil, err
		}
		if _, err := v.next(); err != nil {
			return nil, err
		}
		return []clientv3.Op{clientv3.OpPut(b.floorKey(), strconv.FormatUint(floor, 10))}, nil
	})
	return translate(err, "set floor")
}

// checkTime refuses instants whose Unix nanoseconds (now and now+ttl) do not
// fit an int64.
func checkTime(now time.Time, ttl time.Duration) error {
	n := now.UnixNano()
	if !now.Equal(time.Unix(0, n)) || n > math.MaxInt64-int64(ttl) {
		return fencegate.Errorf(fencegate.CodeInvalidRequest, "time outside the range the etcd backend stores")
	}
	return nil
}

func putJSON(key string, v any) clientv3.Op {
	raw, _ := json.Marshal(v) // records and resources always marshal
	return clientv3.OpPut(key, string(raw))
}

func decode(raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return fencegate.Wrap(err, fencegate.CodeInternal, "malformed registry record in etcd")
	}
	return nil
}
