package etcd

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
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

// Prune implements fencegate.LeaseBackend in one transaction (update): the
// guard on the view, then prune's deletes, at most 3 × leaserule.PruneBatch
// operations and the revision key, within maxTxnOps. The revision key is
// rewritten with its own value (view.keep): the counter, which the guards
// and Incarnation read, does not move, but its ModRevision does, so the
// prune is serialised with every other mutation, as theirs are (an
// acquisition that read a record this prune deletes reads again rather than
// write it back).
func (b *Backend) Prune(ctx context.Context, now time.Time, g fencegate.Guard) (int, error) {
	var n int
	err := b.update(ctx, []string{b.incarnationKey()}, func(v *view) ([]clientv3.Op, error) {
		n = 0
		if err := v.checkIncarnation(g); err != nil {
			return nil, err
		}
		ops, gone, err := b.prune(ctx, v, now, nil, nil)
		if err != nil || len(ops) == 0 {
			return nil, err
		}
		n = gone
		v.keep()
		return ops, nil
	})
	if err != nil {
		return 0, translate(err, "prune")
	}
	return n, nil
}

// prune is the deletion of up to leaserule.PruneBatch lease records past
// retention at now, as of the view, earliest expiry first, leaving out the
// records named in keep (the transaction writes them) and request keys in
// skip, and how many records it deletes. Index entries of records gone or
// re-indexed are dropped too. It costs at most three round trips whatever it
// deletes: the index range, the candidates' records in one transaction, their
// request keys in another (view.getAll); every round trip lengthens the
// decision the revision compare guards.
func (b *Backend) prune(ctx context.Context, v *view, now time.Time, keep map[string]bool, skip map[string]bool) ([]clientv3.Op, int, error) {
	cutoff, ok := leaserule.ForgottenBefore(now, b.retention)
	if !ok {
		return nil, 0, nil
	}
	end := fmt.Sprintf("%s%016x0", b.expiryPrefix(), uint64(cutoff.UnixNano())^(1<<63)) // past every key of the cutoff instant ('/' < '0')
	resp, err := b.client.Get(ctx, b.expiryPrefix(), clientv3.WithRange(end), clientv3.WithRev(v.at),
		clientv3.WithLimit(int64(leaserule.PruneBatch)+int64(len(keep))), clientv3.WithKeysOnly())
	if err != nil {
		return nil, 0, err
	}
	var entries, leaseKeys []string // index entries examined, and their records' keys
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), b.expiryPrefix())
		if len(rest) < 17 || len(entries) == leaserule.PruneBatch || keep[rest[17:]] {
			continue
		}
		entries, leaseKeys = append(entries, string(kv.Key)), append(leaseKeys, b.leaseKey(rest[17:]))
	}
	if err := v.getAll(ctx, leaseKeys); err != nil {
		return nil, 0, err
	}
	var ops []clientv3.Op
	gone := 0
	var reqKeys, reqIDs []string // request keys to delete if they still name the record
	for i, key := range entries {
		raw, ok := v.kvs[leaseKeys[i]]
		if !ok {
			ops = append(ops, clientv3.OpDelete(key))
			continue
		}
		var rec record
		if err := decode(raw, &rec); err != nil {
			return nil, 0, err
		}
		if b.expiryKey(rec.ExpiresAt, rec.ID) != key { // stale entry: the record was renewed
			ops = append(ops, clientv3.OpDelete(key))
			continue
		}
		if !leaserule.Forgotten(rec.State, time.Unix(0, rec.ExpiresAt), now, b.retention) {
			continue
		}
		ops, gone = append(ops, b.forget(&rec)...), gone+1
		if rk := b.requestKey(rec.Owner, rec.RequestID); !skip[rk] {
			reqKeys, reqIDs = append(reqKeys, rk), append(reqIDs, rec.ID)
		}
	}
	if err := v.getAll(ctx, reqKeys); err != nil {
		return nil, 0, err
	}
	for i, rk := range reqKeys {
		if cur, ok := v.kvs[rk]; ok && string(cur) == reqIDs[i] {
			ops = append(ops, clientv3.OpDelete(rk))
		}
	}
	return ops, gone, nil
}

// indexExpiry adds the expiry index entry of every lease record of a prefix
// written before the index existed, once (indexedKey marks it done), in
// transactions of maxTxnOps puts, so Open waits a round trip per 128 records
// rather than per record. The entries are written outside the mutations'
// revision: an entry made stale by a concurrent renewal or pruning is
// dropped by a later prune.
func (b *Backend) indexExpiry(ctx context.Context) error {
	resp, err := b.client.Get(ctx, b.indexedKey())
	if err != nil || len(resp.Kvs) > 0 {
		return err
	}
	from, end := b.prefix+"lease/", clientv3.GetPrefixRangeEnd(b.prefix+"lease/")
	for {
		page, err := b.client.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(4*maxTxnOps))
		if err != nil {
			return err
		}
		for batch := page.Kvs; len(batch) > 0; batch = batch[min(len(batch), maxTxnOps):] {
			ops := make([]clientv3.Op, 0, maxTxnOps)
			for _, kv := range batch[:min(len(batch), maxTxnOps)] {
				var rec record
				if err := decode(kv.Value, &rec); err != nil {
					return err
				}
				ops = append(ops, clientv3.OpPut(b.expiryKey(rec.ExpiresAt, rec.ID), ""))
			}
			if _, err := b.client.Txn(ctx).Then(ops...).Commit(); err != nil {
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
