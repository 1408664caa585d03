package etcd

import (
	"context"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate"
)

// view is one consistent read of the registry: the keys asked for and the
// revision key, all at etcd store revision at. Further reads go to the same
// store revision, so a mutation decides on one snapshot.
type view struct {
	b      *Backend
	at     int64             // etcd store revision of the read
	kvs    map[string][]byte // present keys asked for
	rev    uint64            // the registry revision counter
	revMod int64             // ModRevision of the revision key; 0 if absent
	bumped bool
	kept   bool // the mutation commits without moving the counter (keep)
}

// update reads keys, lets decide compute the writes and commits them with the
// revision key moved (or rewritten as it is, after keep), if no mutation
// committed since the read; otherwise it reads again. decide returning no ops
// (or an error) ends without writing.
func (b *Backend) update(ctx context.Context, keys []string, decide func(*view) ([]clientv3.Op, error)) error {
	for range maxAttempts {
		v, err := b.read(ctx, keys)
		if err != nil {
			return err
		}
		ops, err := decide(v)
		if err != nil || len(ops) == 0 {
			return err
		}
		if !v.bumped && !v.kept {
			return fencegate.Errorf(fencegate.CodeInternal, "mutation without a revision")
		}
		ops = append(ops, clientv3.OpPut(b.revisionKey(), strconv.FormatUint(v.rev, 10)))
		resp, err := b.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(b.revisionKey()), "=", v.revMod)).
			Then(ops...).Commit()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			return nil
		}
	}
	return fencegate.Errorf(fencegate.CodeBackendConflict, "registry etcd: too much contention, retry")
}

func (b *Backend) read(ctx context.Context, keys []string) (*view, error) {
	ops := []clientv3.Op{clientv3.OpGet(b.revisionKey())}
	for _, k := range keys {
		ops = append(ops, clientv3.OpGet(k))
	}
	resp, err := b.client.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, err
	}
	v := &view{b: b, at: resp.Header.Revision, kvs: map[string][]byte{}}
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			if string(kv.Key) == b.revisionKey() {
				v.revMod = kv.ModRevision
				if v.rev, err = parseUint(kv.Value); err != nil {
					return nil, err
				}
				continue
			}
			v.kvs[string(kv.Key)] = kv.Value
		}
	}
	return v, nil
}

// next is the revision this mutation commits under.
func (v *view) next() (uint64, error) {
	if v.rev == ^uint64(0) {
		return 0, fencegate.Errorf(fencegate.CodeInternal, "revision counter exhausted")
	}
	if !v.bumped {
		v.rev++
		v.bumped = true
	}
	return v.rev, nil
}

// keep commits this mutation without moving the revision counter: update
// rewrites the revision key with the value read, which moves its
// ModRevision (what every mutation's compare reads) and nothing a guard or
// Incarnation reads. Only a mutation that deletes records already forgotten
// (Prune) may keep it: every other one must move the revision, so that a
// copy restored from before it shows a lower one.
func (v *view) keep() { v.kept = true }

// get reads key at the view's store revision; nil if absent.
func (v *view) get(ctx context.Context, key string) ([]byte, error) {
	if raw, ok := v.kvs[key]; ok {
		return raw, nil
	}
	resp, err := v.b.client.Get(ctx, key, clientv3.WithRev(v.at))
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, nil
	}
	v.kvs[key] = resp.Kvs[0].Value
	return resp.Kvs[0].Value, nil
}

// maxTxnOps is the most operations one etcd transaction may hold (etcd's
// default --max-txn-ops).
const maxTxnOps = 128

// getAll reads the keys the view does not hold yet at its store revision, in
// one transaction of Gets per maxTxnOps keys, so reading many keys costs a
// round trip per batch instead of one per key (get). Afterwards a key of keys
// missing from v.kvs is absent at v.at.
func (v *view) getAll(ctx context.Context, keys []string) error {
	var todo []clientv3.Op
	seen := map[string]bool{}
	for _, k := range keys {
		if _, ok := v.kvs[k]; !ok && !seen[k] {
			seen[k] = true
			todo = append(todo, clientv3.OpGet(k, clientv3.WithRev(v.at)))
		}
	}
	for len(todo) > 0 {
		n := min(len(todo), maxTxnOps)
		resp, err := v.b.client.Txn(ctx).Then(todo[:n]...).Commit()
		if err != nil {
			return err
		}
		for _, r := range resp.Responses {
			for _, kv := range r.GetResponseRange().Kvs {
				v.kvs[string(kv.Key)] = kv.Value
			}
		}
		todo = todo[n:]
	}
	return nil
}

// record reads lease id; NOT_FOUND if unknown.
func (v *view) record(ctx context.Context, id string) (*record, error) {
	raw, err := v.get(ctx, v.b.leaseKey(id))
	if err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, fencegate.Errorf(fencegate.CodeNotFound, "lease not found")
	}
	var r record
	return &r, decode(raw, &r)
}

// getJSON decodes key into out, leaving out as it is when the key is absent.
func (v *view) getJSON(ctx context.Context, key string, out any) error {
	raw, err := v.get(ctx, key)
	if err != nil || raw == nil {
		return err
	}
	return decode(raw, out)
}

// decode is getJSON for a key read with the view.
func (v *view) decode(key string, out any) error {
	if raw, ok := v.kvs[key]; ok {
		return decode(raw, out)
	}
	return nil
}

// uint reads a decimal key of the view; 0 when absent.
func (v *view) uint(key string) (uint64, error) {
	raw, ok := v.kvs[key]
	if !ok {
		return 0, nil
	}
	return parseUint(raw)
}

func parseUint(raw []byte) (uint64, error) {
	n, err := strconv.ParseUint(string(raw), 10, 64)
	if err != nil {
		return 0, fencegate.Wrap(err, fencegate.CodeInternal, "malformed number in registry etcd")
	}
	return n, nil
}

// liveLease is the etcd lease the live-lease key of one operation is
// attached to: granted on first use, reused by retries, revoked unless the
// attempt that committed used it.
type liveLease struct {
	b       *Backend
	ttl     time.Duration
	id      clientv3.LeaseID
	pending bool // the current attempt's writes attach the live key to id
}

// attempt starts a new decision: nothing uses the lease yet.
func (l *liveLease) attempt() { l.pending = false }

// put returns the Put of the live key of resource, granting the etcd lease
// first if needed.
func (l *liveLease) put(ctx context.Context, resource, leaseID string) (clientv3.Op, error) {
	if l.id == 0 {
		secs := int64((l.ttl + time.Second - 1) / time.Second)
		g, err := l.b.client.Grant(ctx, max(secs, 1))
		if err != nil {
			return clientv3.Op{}, err
		}
		l.id = g.ID
	}
	l.pending = true
	return clientv3.OpPut(l.b.liveKey(resource), leaseID, clientv3.WithLease(l.id)), nil
}

// done revokes a granted etcd lease that no committed write uses; err is the
// outcome of the operation.
func (l *liveLease) done(err error) {
	if l.id == 0 || (err == nil && l.pending) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = l.b.client.Revoke(ctx, l.id) // best effort: it lapses after its TTL anyway
}
