// Package embedded is the lease backend on a local bbolt file: one bolt write
// transaction per mutation, so fences, leases and the global revision move
// together and bolt's single writer makes every operation linearizable.
// Lease records no longer held, and their request IDs, are deleted once
// their expiry + retention has passed (leaserule.Forgotten; WithRetention):
// a bounded batch by each acquisition and by each Prune, found through an
// expiry index.
// Resource fence sequences, the floor and the meta bucket are never deleted.
// Its buckets are prefixed "registry.", so it can share a file with other
// embedded parts.
package embedded

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

var (
	bucketMeta      = []byte("registry.meta")
	bucketLeases    = []byte("registry.leases")
	bucketResources = []byte("registry.resources")
	bucketRequests  = []byte("registry.requests")

	keyRevision    = []byte("revision")
	keyFloor       = []byte("floor")
	keyIncarnation = []byte("incarnation")
	keySince       = []byte("since")
	keyMaxFence    = []byte("maxfence")
)

// Backend implements fencegate.LeaseBackend on bbolt. Fences use the full
// uint64 range.
type Backend struct {
	db        *bbolt.DB
	ownsDB    bool
	retention time.Duration
}

var _ fencegate.LeaseBackend = (*Backend)(nil)

// Open opens (creating if needed) the bolt file at path; Close closes it.
func Open(path string, opts ...Option) (*Backend, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, translate(err, "open registry database")
	}
	b, err := New(db, opts...)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	b.ownsDB = true
	return b, nil
}

// New uses db, creating the registry's buckets; Close leaves db open for its owner.
func New(db *bbolt.DB, opts ...Option) (*Backend, error) {
	err := db.Update(func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketLeases, bucketResources, bucketRequests} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		if err := indexExpiry(tx); err != nil {
			return err
		}
		return initMaxFence(tx)
	})
	if err != nil {
		return nil, translate(err, "create registry buckets")
	}
	b := &Backend{db: db, retention: leaserule.DefaultRetention}
	for _, o := range opts {
		o(b)
	}
	return b, nil
}

// Close closes the database if Open opened it.
func (b *Backend) Close() error {
	if !b.ownsDB {
		return nil
	}
	return translate(b.db.Close(), "close registry database")
}

// Acquire implements fencegate.LeaseBackend.
func (b *Backend) Acquire(ctx context.Context, req fencegate.AcquireRequest) (fencegate.Lease, error) {
	if err := leaserule.CheckAcquire(req); err != nil {
		return fencegate.Lease{}, err
	}
	if err := ctx.Err(); err != nil {
		return fencegate.Lease{}, translate(err, "acquire")
	}
	var out fencegate.Lease
	err := b.db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if err := checkGuard(meta, req.Guard); err != nil {
			return err
		}
		leases, resources, requests := tx.Bucket(bucketLeases), tx.Bucket(bucketResources), tx.Bucket(bucketRequests)
		rk := requestKey(req.Owner, req.RequestID)
		if id := requests.Get(rk); id != nil {
			rec, err := getRecord(leases, string(id))
			if err != nil {
				return err
			}
			if !leaserule.Forgotten(rec.State, time.Unix(0, rec.ExpiresAt), req.Now, b.retention) {
				l := rec.Lease(req.Now)
				if err := leaserule.SameRequest(l, req); err != nil {
					return err
				}
				out = l
				return nil
			}
			// Past retention: the request ID is a new acquisition.
			if err := forget(tx, rec); err != nil {
				return err
			}
		}
		if leases.Get([]byte(req.LeaseID)) != nil {
			return fencegate.Errorf(fencegate.CodeBackendConflict, "lease ID already exists")
		}
		res := resourceRecord{}
		if raw := resources.Get([]byte(req.Resource)); raw != nil {
			var err error
			if res, err = decodeResource(raw); err != nil {
				return err
			}
		}
		if res.Current != "" {
			cur, err := getRecord(leases, res.Current)
			if err != nil {
				return err
			}
			if cur.Lease(req.Now).State == fencegate.StateHeld {
				return fencegate.Errorf(fencegate.CodeLeaseHeld, "resource is held by another lease")
			}
			if cur.State == fencegate.StateHeld { // superseded: expired for good
				cur.State = fencegate.StateExpired
				if err := putRecord(leases, cur); err != nil {
					return err
				}
			}
		}
		fence, err := leaserule.NextFence(res.LastFence, getUint(meta, keyFloor), math.MaxUint64)
		if err != nil {
			return err
		}
		rev, err := bumpRevision(meta)
		if err != nil {
			return err
		}
		if fence > getUint(meta, keyMaxFence) {
			if err := putUint(meta, keyMaxFence, fence); err != nil {
				return err
			}
		}
		// Pruned once nothing can refuse: a refused acquisition walks no
		// old records (the resource row is written whole below).
		if _, err := b.prune(tx, req.Now); err != nil {
			return err
		}
		rec := leaserule.NewRecord(req, fence, rev)
		if err := putRecord(leases, rec); err != nil {
			return err
		}
		if err := tx.Bucket(bucketExpiry).Put(expiryKey(rec.ExpiresAt, rec.ID), nil); err != nil {
			return err
		}
		if err := resources.Put([]byte(req.Resource), resourceRecord{LastFence: fence, Current: rec.ID}.encode()); err != nil {
			return err
		}
		if err := requests.Put(rk, []byte(rec.ID)); err != nil {
			return err
		}
		out = rec.Lease(req.Now)
		return nil
	})
	return out, translate(err, "acquire")
}

// Renew implements fencegate.LeaseBackend. The lease keeps its TTL and
// Revision of acquisition; only ExpiresAt moves, to now+ttl.
func (b *Backend) Renew(ctx context.Context, id, owner string, ttl time.Duration, now time.Time, g fencegate.Guard) (fencegate.Lease, error) {
	if err := leaserule.CheckTTL(ttl); err != nil {
		return fencegate.Lease{}, err
	}
	var out fencegate.Lease
	err := b.db.Update(func(tx *bbolt.Tx) error {
		if err := checkGuard(tx.Bucket(bucketMeta), g); err != nil {
			return err
		}
		leases := tx.Bucket(bucketLeases)
		rec, err := getRecord(leases, id)
		if err != nil {
			return err
		}
		if err := leaserule.Mismatch(rec.Lease(now), owner); err != nil {
			return err
		}
		if rec.Lease(now).State != fencegate.StateHeld {
			return fencegate.Errorf(fencegate.CodeLeaseNotHeld, "lease %s is not held", id)
		}
		if _, err := bumpRevision(tx.Bucket(bucketMeta)); err != nil {
			return err
		}
		idx := tx.Bucket(bucketExpiry)
		if err := idx.Delete(expiryKey(rec.ExpiresAt, rec.ID)); err != nil {
			return err
		}
		rec.ExpiresAt = now.Add(ttl).UnixNano()
		if err := putRecord(leases, rec); err != nil {
			return err
		}
		if err := idx.Put(expiryKey(rec.ExpiresAt, rec.ID), nil); err != nil {
			return err
		}
		out = rec.Lease(now)
		return nil
	})
	return out, translate(err, "renew")
}

// Release implements fencegate.LeaseBackend. A lease that is no longer held
// is returned as it is, released false.
func (b *Backend) Release(ctx context.Context, id, owner string, now time.Time, g fencegate.Guard) (fencegate.Lease, bool, error) {
	var out fencegate.Lease
	released := false
	err := b.db.Update(func(tx *bbolt.Tx) error {
		if err := checkGuard(tx.Bucket(bucketMeta), g); err != nil {
			return err
		}
		leases, resources := tx.Bucket(bucketLeases), tx.Bucket(bucketResources)
		rec, err := getRecord(leases, id)
		if err != nil {
			return err
		}
		if err := leaserule.Mismatch(rec.Lease(now), owner); err != nil {
			return err
		}
		if rec.Lease(now).State != fencegate.StateHeld {
			out = rec.Lease(now)
			return nil
		}
		if _, err := bumpRevision(tx.Bucket(bucketMeta)); err != nil {
			return err
		}
		rec.State = fencegate.StateReleased
		if err := putRecord(leases, rec); err != nil {
			return err
		}
		res, err := decodeResource(resources.Get([]byte(rec.Resource)))
		if err != nil {
			return err
		}
		if res.Current == rec.ID {
			res.Current = ""
			if err := resources.Put([]byte(rec.Resource), res.encode()); err != nil {
				return err
			}
		}
		out, released = rec.Lease(now), true
		return nil
	})
	return out, released && err == nil, translate(err, "release")
}

// Lease implements fencegate.LeaseBackend.
func (b *Backend) Lease(ctx context.Context, id string, now time.Time) (fencegate.Lease, error) {
	var out fencegate.Lease
	err := b.db.View(func(tx *bbolt.Tx) error {
		rec, err := getRecord(tx.Bucket(bucketLeases), id)
		if err != nil {
			return err
		}
		out = rec.Lease(now)
		return nil
	})
	return out, translate(err, "read lease")
}

// SetFloor implements fencegate.LeaseBackend. The floor only ever rises; a
// lower floor changes nothing and moves no revision.
func (b *Backend) SetFloor(ctx context.Context, floor uint64, g fencegate.Guard) error {
	if err := leaserule.CheckFloor(floor, math.MaxUint64); err != nil {
		return err
	}
	err := b.db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if err := checkGuard(meta, g); err != nil {
			return err
		}
		if floor <= getUint(meta, keyFloor) {
			return nil
		}
		if _, err := bumpRevision(meta); err != nil {
			return err
		}
		return putUint(meta, keyFloor, floor)
	})
	return translate(err, "set floor")
}

func getRecord(leases *bbolt.Bucket, id string) (*record, error) {
	raw := leases.Get([]byte(id))
	if raw == nil {
		return nil, fencegate.Errorf(fencegate.CodeNotFound, "lease not found")
	}
	return decodeRecord(raw)
}

func putRecord(leases *bbolt.Bucket, r *record) error {
	raw, err := encodeRecord(r)
	if err != nil {
		return err
	}
	return leases.Put([]byte(r.ID), raw)
}

func getUint(b *bbolt.Bucket, key []byte) uint64 {
	if v := b.Get(key); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func putUint(b *bbolt.Bucket, key []byte, v uint64) error {
	return b.Put(key, binary.BigEndian.AppendUint64(nil, v))
}

// bumpRevision moves the global revision counter and returns its new value.
func bumpRevision(meta *bbolt.Bucket) (uint64, error) {
	rev := getUint(meta, keyRevision)
	if rev == math.MaxUint64 {
		return 0, fencegate.Errorf(fencegate.CodeInternal, "revision counter exhausted")
	}
	return rev + 1, putUint(meta, keyRevision, rev+1)
}

// translate turns bolt and context errors into *fencegate.Error.
func translate(err error, op string) error {
	var fe *fencegate.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &fe):
		return err
	case errors.Is(err, berrors.ErrKeyTooLarge), errors.Is(err, berrors.ErrValueTooLarge):
		return fencegate.Wrap(err, fencegate.CodeInvalidRequest, op+": value too large")
	case errors.Is(err, berrors.ErrDatabaseNotOpen), errors.Is(err, berrors.ErrTimeout),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, op+": registry database unavailable")
	default:
		return fencegate.Wrap(err, fencegate.CodeInternal, op)
	}
}
