package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

// fault is one kind of failure the nemesis injects: inject starts it and
// returns the function that ends it.
type fault struct {
	name   string
	inject func(ctx context.Context, rng *rand.Rand) (heal func() error, err error)
}

// faults lists the failures of a run. Postgres restarts need a server of the
// test's own: pg is nil without one. stall adds stallFault (off by default:
// see README.md, "Findings").
func (c *cluster) faults(pg *testenv.Postgres, stall bool) []fault {
	fs := []fault{
		{"kill -9 a replica", c.killReplica},
		{"kill -9 the registry", func(ctx context.Context, rng *rand.Rand) (func() error, error) {
			c.registry.kill()
			return func() error {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				return c.registry.start(sctx)
			}, nil
		}},
		{"latency replica->postgres", func(ctx context.Context, rng *rand.Rand) (func() error, error) {
			l := c.pgLinks[rng.IntN(len(c.pgLinks))]
			return l.Heal, l.Latency(50+rng.IntN(250), 40)
		}},
		{"latency replica->s3", func(ctx context.Context, rng *rand.Rand) (func() error, error) {
			l := c.s3Links[rng.IntN(len(c.s3Links))]
			return l.Heal, l.Latency(50+rng.IntN(400), 40)
		}},
		{"connection resets replica->postgres", func(ctx context.Context, rng *rand.Rand) (func() error, error) {
			l := c.pgLinks[rng.IntN(len(c.pgLinks))]
			return l.Heal, l.ResetPeers(rng.IntN(20))
		}},
		{"connection resets replica->s3", func(ctx context.Context, rng *rand.Rand) (func() error, error) {
			l := c.s3Links[rng.IntN(len(c.s3Links))]
			return l.Heal, l.ResetPeers(rng.IntN(20))
		}},
		{"replica cut off from its stores", func(ctx context.Context, rng *rand.Rand) (func() error, error) {
			i := rng.IntN(len(c.replicas))
			c.pgLinks[i].Sever()
			c.s3Links[i].Sever()
			return func() error { return errors.Join(c.pgLinks[i].Heal(), c.s3Links[i].Heal()) }, nil
		}},
		{"etcd member killed", c.killEtcdMember},
		{"etcd leader moved", func(ctx context.Context, rng *rand.Rand) (func() error, error) {
			lead, err := c.etcd.Leader(ctx)
			if err != nil {
				return nil, err
			}
			to := (lead + 1 + rng.IntN(2)) % 3
			return func() error { return nil }, c.etcd.MoveLeader(ctx, to)
		}},
	}
	if stall && c.ownS3 != nil {
		fs = append(fs, fault{stallFault, c.stallS3})
	}
	if pg != nil {
		// Down for the fault's length: killed as a crash (immediate mode,
		// crash recovery at the next start) or shut down cleanly (fast mode).
		// Both run in the test's goroutine: they fail the test if the server
		// will not stop or start.
		fs = append(fs, fault{"postgres crash and restart", func(context.Context, *rand.Rand) (func() error, error) {
			pg.Kill()
			return func() error { pg.Start(); return nil }, nil
		}}, fault{"postgres clean restart", func(context.Context, *rand.Rand) (func() error, error) {
			pg.Stop()
			return func() error { pg.Start(); return nil }, nil
		}})
	}
	return fs
}

// stallFault is the name of the fault stallS3 injects.
const stallFault = "s3 server paused past the orphan grace"

// stallS3 pauses the test's own S3 server (SIGSTOP) for 8 to 9 s, longer
// than reconcile.orphan (6 s): a PUT a replica sent and gave up on
// (effectTimeout, 3 s) waits in the server's socket buffer and reaches it
// when it resumes, after the PUT's presigned expiry (effectTimeout after its
// admission): the server refuses it, so the reconcilers may call it
// NOT_APPLIED once the orphan grace after that expiry has passed.
func (c *cluster) stallS3(ctx context.Context, rng *rand.Rand) (func() error, error) {
	if err := c.ownS3.Pause(); err != nil {
		return nil, err
	}
	hold := time.Duration(8000+rng.IntN(1000)) * time.Millisecond
	return func() error {
		sleepCtx(context.WithoutCancel(ctx), hold)
		return c.ownS3.Resume()
	}, nil
}

// killReplica kills a running replica with SIGKILL; healing starts it again
// on the same address, config and data directory.
func (c *cluster) killReplica(ctx context.Context, rng *rand.Rand) (func() error, error) {
	var up []*replica
	for _, r := range c.replicas {
		if r.up() {
			up = append(up, r)
		}
	}
	if len(up) < 2 {
		return nil, errors.New("fewer than two replicas up")
	}
	r := up[rng.IntN(len(up))]
	r.kill()
	return func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return r.start(sctx)
	}, nil
}

// killEtcdMember kills one member (the leader half the time) with SIGKILL;
// healing starts it again on its own data.
func (c *cluster) killEtcdMember(ctx context.Context, rng *rand.Rand) (func() error, error) {
	i := rng.IntN(3)
	if rng.IntN(2) == 0 {
		if lead, err := c.etcd.Leader(ctx); err == nil {
			i = lead
		}
	}
	if err := c.etcd.Kill(i); err != nil {
		return nil, err
	}
	return func() error { return c.etcd.Start(i) }, nil
}

// nemesis injects the faults one at a time, in shuffled rounds so that each
// is injected once per round, until ctx ends and every fault has been
// injected at least once, or until hard ends. Each fault lasts 1 to 4 s, the
// gaps between them 0.5 to 1.5 s. It returns the first error a healing
// returned; every fault is healed on return.
func (c *cluster) nemesis(ctx, hard context.Context, rng *rand.Rand, faults []fault) error {
	injected := map[string]bool{}
	done := func() bool {
		if hard.Err() != nil {
			return true
		}
		if ctx.Err() == nil {
			return false
		}
		for _, f := range faults {
			if !injected[f.name] {
				return false
			}
		}
		return true
	}
	for !done() {
		for _, k := range rng.Perm(len(faults)) {
			if done() {
				return nil
			}
			f := faults[k]
			if !sleepCtx(hard, time.Duration(500+rng.IntN(1000))*time.Millisecond) {
				return nil
			}
			heal, err := f.inject(hard, rng)
			if err != nil {
				c.count("fault failed to inject: " + f.name)
				continue
			}
			injected[f.name] = true
			c.count("fault " + f.name)
			sleepCtx(hard, time.Duration(1000+rng.IntN(3000))*time.Millisecond)
			if err := heal(); err != nil {
				return fmt.Errorf("heal %s: %w", f.name, err)
			}
		}
	}
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
