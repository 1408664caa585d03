package etcd

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// WithRetention sets how long a lease record that is no longer held, and its
// request ID, are kept after the lease's expiry (leaserule.Forgotten; at
// least leaserule.MinRetention, 0 keeps them for ever). The default is
// leaserule.DefaultRetention.
func WithRetention(d time.Duration) Option {
	return func(c *config) { c.retention = leaserule.Retention(d) }
}

// expiryPrefix holds the expiry index: one empty key per lease record,
// <prefix>exp/<sign-flipped expiry ns, 16 hex digits>/<lease ID>, so keys
// sort by expiry.
func (b *Backend) expiryPrefix() string { return b.prefix + "exp/" }

func (b *Backend) expiryKey(expires int64, id string) string {
	return fmt.Sprintf("%s%016x/%s", b.expiryPrefix(), uint64(expires)^(1<<63), id)
}

// indexedKey marks a prefix whose expiry index covers every lease record.
func (b *Backend) indexedKey() string { return b.prefix + "expindexed" }

// forget is the deletion of rec's record and expiry index entry (its request
// key the caller deletes or overwrites; its resource's current pointer may
// then name a missing record, which reads as no live lease).
func (b *Backend) forget(rec *record) []clientv3.Op {
	return []clientv3.Op{clientv3.OpDelete(b.leaseKey(rec.ID)), clientv3.OpDelete(b.expiryKey(rec.ExpiresAt, rec.ID))}
}

// prune is the deletion of up to leaserule.PruneBatch lease records past
// retention at now, as of the view, earliest expiry first, leaving out the
// records named in keep (the transaction writes them) and request keys in
// skip. Index entries of records gone or re-indexed are dropped too.
func (b *Backend) prune(ctx context.Context, v *view, now time.Time, keep map[string]bool, skip map[string]bool) ([]clientv3.Op, error) {
	cutoff, ok := leaserule.ForgottenBefore(now, b.retention)
	if !ok {
		return nil, nil
	}
	end := fmt.Sprintf("%s%016x0", b.expiryPrefix(), uint64(cutoff.UnixNano())^(1<<63)) // past every key of the cutoff instant ('/' < '0')
	resp, err := b.client.Get(ctx, b.expiryPrefix(), clientv3.WithRange(end), clientv3.WithRev(v.at),
		clientv3.WithLimit(int64(leaserule.PruneBatch)+int64(len(keep))), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	var ops []clientv3.Op
	n := 0
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		rest := strings.TrimPrefix(key, b.expiryPrefix())
		if len(rest) < 17 || n == leaserule.PruneBatch {
			continue
		}
		id := rest[17:]
		if keep[id] {
			continue
		}
		raw, err := v.get(ctx, b.leaseKey(id))
		if err != nil {
			return nil, err
		}
		n++
		if raw == nil {
			ops = append(ops, clientv3.OpDelete(key))
			continue
		}
		var rec record
		if err := decode(raw, &rec); err != nil {
			return nil, err
		}
		if b.expiryKey(rec.ExpiresAt, id) != key { // stale entry: the record was renewed
			ops = append(ops, clientv3.OpDelete(key))
			continue
		}
		if !leaserule.Forgotten(rec.State, time.Unix(0, rec.ExpiresAt), now, b.retention) {
			continue
		}
		ops = append(ops, b.forget(&rec)...)
		rk := b.requestKey(rec.Owner, rec.RequestID)
		if skip[rk] {
			continue
		}
		if cur, err := v.get(ctx, rk); err != nil {
			return nil, err
		} else if string(cur) == id {
			ops = append(ops, clientv3.OpDelete(rk))
		}
	}
	return ops, nil
}

// indexExpiry adds the expiry index entry of every lease record of a prefix
// written before the index existed, once (indexedKey marks it done). The
// entries are written outside the mutations' revision: an entry made stale
// by a concurrent renewal or pruning is dropped by a later prune.
func (b *Backend) indexExpiry(ctx context.Context) error {
	resp, err := b.client.Get(ctx, b.indexedKey())
	if err != nil || len(resp.Kvs) > 0 {
		return err
	}
	from, end := b.prefix+"lease/", clientv3.GetPrefixRangeEnd(b.prefix+"lease/")
	for {
		page, err := b.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(500))
		if err != nil {
			return err
		}
		for _, kv := range page.Kvs {
			var rec record
			if err := decode(kv.Value, &rec); err != nil {
				return err
			}
			if _, err := b.client.Put(ctx, b.expiryKey(rec.ExpiresAt, rec.ID), ""); err != nil {
				return err
			}
		}
		if !page.More || len(page.Kvs) == 0 {
			break
		}
		from = string(page.Kvs[len(page.Kvs)-1].Key) + "\x00"
	}
	_, err = b.client.Put(ctx, b.indexedKey(), "1")
	return err
}
