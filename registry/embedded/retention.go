package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"time"

	"go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// bucketExpiry indexes lease records by expiry (expiryKey), so an acquisition
// finds the records past retention without reading the others.
var bucketExpiry = []byte("registry.expiry")

// Option configures Open and New.
type Option func(*Backend)

// WithRetention sets how long a lease record that is no longer held, and its
// request ID, are kept after the lease's expiry (leaserule.Forgotten; at
// least leaserule.MinRetention, 0 keeps them for ever). The default is
// leaserule.DefaultRetention.
func WithRetention(d time.Duration) Option {
	return func(b *Backend) { b.retention = leaserule.Retention(d) }
}

// expiryKey is the index key of lease id expiring at expires (Unix ns): the
// sign-flipped big-endian time first, so keys sort by expiry.
func expiryKey(expires int64, id string) []byte {
	k := binary.BigEndian.AppendUint64(nil, uint64(expires)^(1<<63))
	return append(k, id...)
}

// indexExpiry creates the expiry index, filling it from the lease records of
// a file written before it existed.
func indexExpiry(tx *bbolt.Tx) error {
	if tx.Bucket(bucketExpiry) != nil {
		return nil
	}
	idx, err := tx.CreateBucket(bucketExpiry)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketLeases).ForEach(func(_, v []byte) error {
		rec, err := decodeRecord(v)
		if err != nil {
			return err
		}
		return idx.Put(expiryKey(rec.ExpiresAt, rec.ID), nil)
	})
}

// forget deletes rec, its request key, its expiry index entry and its
// resource's pointer to it; the resource's fence sequence stays.
func forget(tx *bbolt.Tx, rec *record) error {
	requests, resources := tx.Bucket(bucketRequests), tx.Bucket(bucketResources)
	if err := tx.Bucket(bucketLeases).Delete([]byte(rec.ID)); err != nil {
		return err
	}
	if err := tx.Bucket(bucketExpiry).Delete(expiryKey(rec.ExpiresAt, rec.ID)); err != nil {
		return err
	}
	rk := requestKey(rec.Owner, rec.RequestID)
	if bytes.Equal(requests.Get(rk), []byte(rec.ID)) {
		if err := requests.Delete(rk); err != nil {
			return err
		}
	}
	raw := resources.Get([]byte(rec.Resource))
	if raw == nil {
		return nil
	}
	res, err := decodeResource(raw)
	if err != nil || res.Current != rec.ID {
		return err
	}
	res.Current = ""
	return resources.Put([]byte(rec.Resource), res.encode())
}

// Prune implements fencegate.LeaseBackend: the guard, then prune, in one
// write transaction that moves no revision. A read transaction looks first,
// so a call with nothing past retention writes (and syncs) nothing; its
// guard is checked there.
func (b *Backend) Prune(ctx context.Context, now time.Time, g fencegate.Guard) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, translate(err, "prune")
	}
	cutoff, ok := leaserule.ForgottenBefore(now, b.retention)
	due := false
	err := b.db.View(func(tx *bbolt.Tx) error {
		if err := checkGuard(tx.Bucket(bucketMeta), g); err != nil {
			return err
		}
		k, _ := tx.Bucket(bucketExpiry).Cursor().First()
		due = ok && k != nil && binary.BigEndian.Uint64(k[:8]) <= expiryBound(cutoff)
		return nil
	})
	if err != nil || !due {
		return 0, translate(err, "prune")
	}
	n := 0
	err = b.db.Update(func(tx *bbolt.Tx) (err error) {
		if err := checkGuard(tx.Bucket(bucketMeta), g); err != nil {
			return err
		}
		n, err = b.prune(tx, now)
		return err
	})
	if err != nil {
		return 0, translate(err, "prune")
	}
	return n, nil
}

// expiryBound is the first 8 bytes of the expiry keys of cutoff (expiryKey)
// as a number: keys at or below it expire at or before cutoff.
func expiryBound(cutoff time.Time) uint64 { return uint64(cutoff.UnixNano()) ^ (1 << 63) }

// prune forgets up to leaserule.PruneBatch records past retention at now,
// earliest expiry first, and returns how many.
func (b *Backend) prune(tx *bbolt.Tx, now time.Time) (int, error) {
	cutoff, ok := leaserule.ForgottenBefore(now, b.retention)
	if !ok {
		return 0, nil
	}
	bound := expiryBound(cutoff)
	var gone []*record
	var stale [][]byte // index entries of records already gone
	c := tx.Bucket(bucketExpiry).Cursor()
	for k, _ := c.First(); k != nil && binary.BigEndian.Uint64(k[:8]) <= bound && len(gone)+len(stale) < leaserule.PruneBatch; k, _ = c.Next() {
		raw := tx.Bucket(bucketLeases).Get(k[8:])
		if raw == nil {
			stale = append(stale, bytes.Clone(k))
			continue
		}
		rec, err := decodeRecord(raw)
		if err != nil {
			return 0, err
		}
		if leaserule.Forgotten(rec.State, time.Unix(0, rec.ExpiresAt), now, b.retention) {
			gone = append(gone, rec)
		}
	}
	// Deleted after the walk: not while the cursor moves over the bucket.
	for _, k := range stale {
		if err := tx.Bucket(bucketExpiry).Delete(k); err != nil {
			return 0, err
		}
	}
	for _, rec := range gone {
		if err := forget(tx, rec); err != nil {
			return 0, err
		}
	}
	return len(gone), nil
}
