// Package redis is the lease backend on Redis (go-redis/v9). Each operation is
// one Lua script (EVALSHA), so a lease, its resource's fence counter and the
// global revision move together atomically; Lease is a single HGETALL.
//
// Fence source: a per-resource counter moved by INCR, lifted to the floor
// first (fence = max(counter, floor) + 1). Redis integers are int64, so fences
// and revisions stop at math.MaxInt64: an acquire past it fails with INTERNAL,
// never wraps, and SetFloor refuses floors within fencegate.MinFenceHeadroom
// of it with INVALID_REQUEST.
//
// Time: the registry's clock decides. A lease record keeps AcquiredAt and
// ExpiresAt as data and its state is read at the now passed in. The live-lease
// key <prefix>live:<resource> also gets a server-side PEXPIRE of the lease TTL
// as a safety net for anything reading Redis directly; the backend never
// decides on it, because the server's clock is not the registry's. Lease
// records and request keys follow the retention rule on the registry's clock
// (leaserule.Forgotten): past expiry + Retention (default 7 days) a reuse of
// the request ID is a new acquisition, and each acquisition and each Prune
// deletes up to leaserule.PruneBatch such records, found through the expiry
// sorted set.
// They also carry a server-side PEXPIRE of TTL + Retention from the acquire
// or renew that set their expiry (so expiry + Retention; a release or a
// supersession leaves it) as a backstop; fence counters, the floor and the
// revision have no TTL and are never deleted.
//
// Every key starts with the prefix. The scripts build their keys from it, so
// on Redis Cluster the prefix must carry a hash tag (for example
// "{fencegate}:registry:") that puts them all in one slot.
package redis

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/registry/internal/leaserule"
)

// DefaultPrefix is the key prefix Open uses unless WithPrefix says otherwise.
const DefaultPrefix = "{fencegate}:registry:"

// DefaultRetention is how long lease records outlive their TTL
// (leaserule.DefaultRetention).
const DefaultRetention = leaserule.DefaultRetention

// MaxFence is the highest fence (and revision) this backend can hand out.
const MaxFence = uint64(math.MaxInt64)

// Backend implements fencegate.LeaseBackend on Redis.
type Backend struct {
	client    redis.UniversalClient
	prefix    string
	retention time.Duration
	owns      bool
	replicas  int
	waitFor   time.Duration
}

var _ fencegate.LeaseBackend = (*Backend)(nil)

// Option configures a Backend.
type Option func(*config)

type config struct {
	prefix    string
	retention time.Duration
	redisOpts func(*redis.Options)
	volatile  bool
	replicas  int
	waitFor   time.Duration
}

// AllowVolatile lets Open accept a server that does not fsync every write to
// its append-only file. Such a server can lose issued fences on a crash or
// restart; the registry detects that (the incarnation marker), but only an
// operator who accepts the pause it causes should allow it.
func AllowVolatile() Option { return func(c *config) { c.volatile = true } }

// WithReplicas makes every mutation wait (WAIT n, up to timeout) until n
// replicas have it before it is answered, so a failover to a replica does not
// lose a fence already handed out; fewer acknowledgements are
// BACKEND_UNAVAILABLE (the fence is burned, never handed out).
func WithReplicas(n int, timeout time.Duration) Option {
	return func(c *config) { c.replicas, c.waitFor = max(n, 0), max(timeout, time.Millisecond) }
}

// WithPrefix sets the key prefix (Open only; New takes it as an argument).
func WithPrefix(p string) Option { return func(c *config) { c.prefix = p } }

// MinRetention is the shortest retention accepted: lease records expire on
// the Redis server's clock, so they must outlive any skew from the registry's
// (leaserule.MinRetention).
const MinRetention = leaserule.MinRetention

// WithRetention sets how long lease records and request IDs outlive their
// lease TTL (at least MinRetention); 0 keeps them forever.
func WithRetention(d time.Duration) Option {
	return func(c *config) { c.retention = leaserule.Retention(d) }
}

// WithRedisOptions lets Open adjust the client options (password, DB, TLS).
func WithRedisOptions(f func(*redis.Options)) Option { return func(c *config) { c.redisOpts = f } }

func configure(opts []Option) config {
	c := config{prefix: DefaultPrefix, retention: DefaultRetention}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// Open connects to the Redis server at addr and checks it answers; Close
// closes the client.
func Open(ctx context.Context, addr string, opts ...Option) (*Backend, error) {
	c := configure(opts)
	ro := &redis.Options{Addr: addr}
	if c.redisOpts != nil {
		c.redisOpts(ro)
	}
	client := redis.NewClient(ro)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, translate(err, "connect registry redis")
	}
	if !c.volatile {
		if err := checkDurable(ctx, client, addr); err != nil {
			_ = client.Close()
			return nil, err
		}
	}
	return &Backend{client: client, prefix: c.prefix, retention: c.retention, owns: true,
		replicas: c.replicas, waitFor: c.waitFor}, nil
}

// checkDurable refuses (UNSUPPORTED) a server that does not write every
// command to its append-only file before answering: appendonly yes and
// appendfsync always (https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/).
// With everysec up to a second of acquisitions, and with RDB snapshots
// everything since the last one, is lost by a crash.
//
// It also refuses a server that may evict keys (maxmemory-policy other than
// noeviction, https://redis.io/docs/latest/develop/reference/eviction/): an
// evicted fence counter would hand out its fences again, an evicted lease
// or request key would let a second holder in or lose a repeated request's
// answer, and the loss checks see none of it.
func checkDurable(ctx context.Context, client *redis.Client, addr string) error {
	got := map[string]string{}
	for _, key := range []string{"appendonly", "appendfsync", "maxmemory-policy"} {
		m, err := client.ConfigGet(ctx, key).Result()
		if err != nil {
			return fencegate.Wrap(err, fencegate.CodeUnsupported,
				"registry redis "+addr+": cannot read its persistence settings (CONFIG GET); start with --allow-volatile-backend if the server is known to be durable")
		}
		got[key] = m[key]
	}
	if got["appendonly"] != "yes" || got["appendfsync"] != "always" {
		return fencegate.Errorf(fencegate.CodeUnsupported,
			"registry redis %s runs with appendonly=%s appendfsync=%s: a crash or restart loses issued fences; "+
				"configure appendonly yes and appendfsync always (and replicas=N to WAIT for replicas), or start with --allow-volatile-backend",
			addr, got["appendonly"], got["appendfsync"])
	}
	if got["maxmemory-policy"] != "noeviction" {
		return fencegate.Errorf(fencegate.CodeUnsupported,
			"registry redis %s runs with maxmemory-policy=%s: an evicted key hands out its fences again; "+
				"configure maxmemory-policy noeviction, or start with --allow-volatile-backend",
			addr, got["maxmemory-policy"])
	}
	return nil
}

// replicate waits for the configured replicas to acknowledge what the
// mutation answers (WAIT, https://redis.io/docs/latest/commands/wait/).
// WAIT counts the replicas holding the last write of its own connection,
// which a pooled client need not have run the script on, and the script may
// have written nothing (a repeated request ID, a release of a lease no
// longer held, a floor already higher: the state was written before, maybe
// by another process whose WAIT failed). So it first writes a mark (INCR of
// the prefix's "replicated") on WAIT's connection, in one pipeline with it:
// the state the answer reflects precedes that write in the replication
// stream.
func (b *Backend) replicate(ctx context.Context, op string) error {
	if b.replicas == 0 {
		return nil
	}
	var wait *redis.Cmd
	if _, err := b.client.Pipelined(ctx, func(p redis.Pipeliner) error { // one connection, one round trip
		p.Incr(ctx, b.prefix+"replicated")
		wait = p.Do(ctx, "WAIT", b.replicas, b.waitFor.Milliseconds())
		return nil
	}); err != nil {
		return translate(err, op+": WAIT")
	}
	n, err := wait.Int()
	if err != nil {
		return translate(err, op+": WAIT")
	}
	if n < b.replicas {
		return fencegate.Errorf(fencegate.CodeBackendUnavailable, "%s: %d of %d replicas acknowledged within %v", op, n, b.replicas, b.waitFor)
	}
	return nil
}

// New uses client with keys under prefix; Close leaves the client open. Of
// opts only WithRetention applies.
func New(client redis.UniversalClient, prefix string, opts ...Option) *Backend {
	c := configure(opts)
	return &Backend{client: client, prefix: prefix, retention: c.retention}
}

// Close closes the client if Open made it.
func (b *Backend) Close() error {
	if !b.owns {
		return nil
	}
	return translate(b.client.Close(), "close registry redis")
}

// Acquire implements fencegate.LeaseBackend in one script.
func (b *Backend) Acquire(ctx context.Context, req fencegate.AcquireRequest) (fencegate.Lease, error) {
	if err := leaserule.CheckAcquire(req); err != nil {
		return fencegate.Lease{}, err
	}
	now, exp, err := stamps(req.Now, req.TTL)
	if err != nil {
		return fencegate.Lease{}, err
	}
	cutoff, cutoffMs := b.cutoff(req.Now)
	l, err := b.mutate(ctx, acquireScript, "acquire", req.Now, req.Guard, req.LeaseID, req.Resource, req.Owner, req.RequestID,
		req.OperationID, req.OperationRoot, req.OperationCategory, strconv.FormatInt(int64(req.TTL), 10),
		now, exp, millis(req.TTL), b.keep(req.TTL), cutoff, cutoffMs, unixMillis(req.Now.Add(req.TTL)), leaserule.PruneBatch)
	if err != nil {
		return fencegate.Lease{}, err
	}
	// A repeat returns the first lease; a new one reflects req, so this only
	// ever refuses repeats (which changed nothing).
	if err := leaserule.SameRequest(l, req); err != nil {
		return fencegate.Lease{}, err
	}
	return l, nil
}

// Renew implements fencegate.LeaseBackend. The lease keeps its TTL and
// Revision of acquisition; only ExpiresAt moves, to now+ttl.
func (b *Backend) Renew(ctx context.Context, id, owner string, ttl time.Duration, now time.Time, g fencegate.Guard) (fencegate.Lease, error) {
	if err := leaserule.CheckTTL(ttl); err != nil {
		return fencegate.Lease{}, err
	}
	at, exp, err := stamps(now, ttl)
	if err != nil {
		return fencegate.Lease{}, err
	}
	return b.mutate(ctx, renewScript, "renew", now, g, id, owner, at, exp, millis(ttl), b.keep(ttl), unixMillis(now.Add(ttl)))
}

// Release implements fencegate.LeaseBackend. A lease that is no longer held
// is returned as it is, released false: the script answers it with status
// KEPT instead of OK.
// The record's expiry, and so its retention, does not move.
func (b *Backend) Release(ctx context.Context, id, owner string, now time.Time, g fencegate.Guard) (fencegate.Lease, bool, error) {
	at, _, err := stamps(now, 0)
	if err != nil {
		return fencegate.Lease{}, false, err
	}
	l, status, err := b.mutateStatus(ctx, releaseScript, "release", now, g, id, owner, at)
	return l, err == nil && status == "OK", err
}

// Lease implements fencegate.LeaseBackend with one HGETALL.
func (b *Backend) Lease(ctx context.Context, id string, now time.Time) (fencegate.Lease, error) {
	fields, err := b.client.HGetAll(ctx, b.prefix+"lease:"+id).Result()
	if err != nil {
		return fencegate.Lease{}, translate(err, "read lease")
	}
	if len(fields) == 0 {
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeNotFound, "lease not found")
	}
	return parseLease(fields, now)
}

// SetFloor implements fencegate.LeaseBackend. The floor only ever rises; a
// lower floor changes nothing and moves no revision. A floor within
// fencegate.MinFenceHeadroom of MaxFence is INVALID_REQUEST.
func (b *Backend) SetFloor(ctx context.Context, floor uint64, g fencegate.Guard) error {
	if err := leaserule.CheckFloor(floor, MaxFence); err != nil {
		return err
	}
	_, err := b.mutate(ctx, floorScript, "set floor", time.Time{}, g, strconv.FormatUint(floor, 10))
	return err
}

// run executes script with the common KEYS/ARGV prefix and returns its reply
// as strings.
func (b *Backend) run(ctx context.Context, s *redis.Script, args ...any) ([]string, error) {
	return s.Run(ctx, b.client, []string{b.prefix + "revision"}, append([]any{b.prefix}, args...)...).StringSlice()
}

// mutate runs a mutation's script with args and then the guard g (its
// marker and minimum revision, the script's last two arguments), reads the
// lease it answers at now (answer), and waits for the replicas (replicate).
// A script error is translated, and the guard's refusal is
// COORDINATION_STATE_LOST (refused).
func (b *Backend) mutate(ctx context.Context, s *redis.Script, what string, now time.Time, g fencegate.Guard, args ...any) (fencegate.Lease, error) {
	l, _, err := b.mutateStatus(ctx, s, what, now, g, args...)
	return l, err
}

// mutateStatus is mutate that also returns the status of the script's
// reply when it answered a lease ("OK", or "KEPT" for a release that found
// the lease no longer held).
func (b *Backend) mutateStatus(ctx context.Context, s *redis.Script, what string, now time.Time, g fencegate.Guard, args ...any) (fencegate.Lease, string, error) {
	reply, err := b.run(ctx, s, append(args, g.Incarnation, strconv.FormatUint(g.MinRevision, 10))...)
	if err != nil {
		return fencegate.Lease{}, "", translate(err, what)
	}
	if err := refused(reply, g); err != nil {
		return fencegate.Lease{}, "", err
	}
	l, err := b.answer(reply, now, what)
	if err == nil {
		err = b.replicate(ctx, what)
	}
	return l, reply[0], err
}

// keep is the record PEXPIRE in milliseconds for a lease of ttl, "0" for none.
func (b *Backend) keep(ttl time.Duration) string {
	if b.retention == 0 {
		return "0"
	}
	return millis(ttl + b.retention)
}

// cutoff is the retention cutoff at now (leaserule.ForgottenBefore) as a
// padded Unix-ns stamp and in ms: records expiring at or before it are
// forgotten. Both are "" when nothing is (no retention, or a cutoff before
// 1970, which no stored expiry precedes).
func (b *Backend) cutoff(now time.Time) (string, string) {
	c, ok := leaserule.ForgottenBefore(now, b.retention)
	if !ok || c.UnixNano() < 0 {
		return "", ""
	}
	return pad(c.UnixNano()), unixMillis(c)
}

// unixMillis is t in Unix milliseconds, the score of the expiry index.
func unixMillis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// refused is the COORDINATION_STATE_LOST of a script reply by which the
// guard g refused a mutation (the script's guard), or nil.
func refused(reply []string, g fencegate.Guard) error {
	if len(reply) != 2 {
		return nil
	}
	switch reply[0] {
	case "STATE_LOST":
		return leaserule.CheckIncarnation(g, reply[1], g.MinRevision)
	case "ROLLED_BACK":
		rev, _ := strconv.ParseUint(reply[1], 10, 64)
		return leaserule.CheckIncarnation(g, g.Incarnation, rev)
	}
	return nil
}

// answer turns a script reply into a lease read at now, or the status's error.
func (b *Backend) answer(reply []string, now time.Time, op string) (fencegate.Lease, error) {
	if len(reply) == 0 {
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeInternal, "%s: empty script reply", op)
	}
	switch reply[0] {
	case "OK", "KEPT":
		if len(reply) == 1 {
			return fencegate.Lease{}, nil
		}
		fields := make(map[string]string, len(reply)/2)
		for i := 1; i+1 < len(reply); i += 2 {
			fields[reply[i]] = reply[i+1]
		}
		return parseLease(fields, now)
	case "HELD":
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeLeaseHeld, "resource is held by another lease")
	case "NOT_HELD":
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeLeaseNotHeld, "lease is not held")
	case "NOT_FOUND":
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeNotFound, "lease not found")
	case "OWNER":
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeOwnerMismatch, "lease is not owned by the caller")
	case "OTHER_RESOURCE":
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeRequestIDConflict, "request ID already used for another resource")
	case "ID_EXISTS":
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeBackendConflict, "lease ID already exists")
	case "LOST":
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeInternal, "%s: lease record of this request ID is gone", op)
	case "EXHAUSTED":
		return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeInternal, "fence or revision sequence exhausted (max %d)", MaxFence)
	}
	return fencegate.Lease{}, fencegate.Errorf(fencegate.CodeInternal, "%s: unexpected script status %q", op, reply[0])
}

// parseLease decodes a lease record hash and reads its state at now.
func parseLease(f map[string]string, now time.Time) (fencegate.Lease, error) {
	l := fencegate.Lease{
		ID: f["id"], Resource: f["resource"], Owner: f["owner"], RequestID: f["req"],
		OperationID: f["op"], OperationRoot: f["root"], OperationCategory: f["cat"],
	}
	var err error
	num := func(key string) uint64 {
		v, perr := strconv.ParseUint(f[key], 10, 64)
		if perr != nil && err == nil {
			err = fencegate.Wrap(perr, fencegate.CodeInternal, "lease record field "+key+" is malformed")
		}
		return v
	}
	l.FenceToken, l.Revision, l.TTL = num("fence"), num("rev"), time.Duration(num("ttl"))
	l.AcquiredAt, l.ExpiresAt = time.Unix(0, int64(num("acq"))).UTC(), time.Unix(0, int64(num("exp"))).UTC()
	if err != nil {
		return fencegate.Lease{}, err
	}
	l.State = leaserule.StateAt(fencegate.StatusState(f["state"]), l.ExpiresAt, now)
	return l, nil
}

// stamps formats now and now+ttl as zero-padded Unix nanoseconds, whose
// string order is time order; INVALID_REQUEST outside 1970..2262.
func stamps(now time.Time, ttl time.Duration) (string, string, error) {
	n := now.UnixNano()
	if n < 0 || n > math.MaxInt64-int64(ttl) || !now.Equal(time.Unix(0, n)) {
		return "", "", fencegate.Errorf(fencegate.CodeInvalidRequest, "time outside the range the Redis backend stores")
	}
	return pad(n), pad(n + int64(ttl)), nil
}

func pad(n int64) string { return padded(strconv.FormatInt(n, 10)) }

func padded(s string) string {
	const zeros = "00000000000000000000"
	return zeros[:20-len(s)] + s
}

// millis is d in whole milliseconds, rounded up, at least 1.
func millis(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(max(int64(ms), 1), 10)
}
