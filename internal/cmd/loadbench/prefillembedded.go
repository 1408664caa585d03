package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/embedded"
	fggateway "github.com/fencegate/fencegate/gateway"
)

// prefillEmbedded writes n settled receipts into a new embedded fence store
// file at path, spread over n/10 resources (segments 1, 2, ... of fence 1
// each, with their bindings and versions), as a store that has served n
// writes through `gateway dev` holds them: through the store's own Admit
// and Settle (so every index a write maintains is filled), with values as
// long as the gateway's (sha256 digests, quoted ETags) and time-ordered
// receipt IDs made as the gateway makes them (gateway.NewOrderedID), in the
// order they are written, starting a day before now. Many writers share the
// store's group commit, so filling costs about one commit per a few hundred
// receipts. The first error stops every writer.
func prefillEmbedded(ctx context.Context, path string, n int) error {
	s, err := embedded.Open(path)
	if err != nil {
		return err
	}
	f := &filler{s: s, res: max(1, n/10), n: n, start: time.Now().Add(-24 * time.Hour)}
	const writers = 512
	g, gctx := errgroup.WithContext(ctx)
	for w := range writers {
		g.Go(func() error { return f.resources(gctx, w, writers) })
	}
	err = g.Wait()
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

// filler is one prefill's shared state.
type filler struct {
	s      *embedded.Store
	res, n int
	start  time.Time
	seq    atomic.Int64 // receipts written so far: each one's time is start + seq µs
}

// resources admits and settles, in segment order, the receipts of the
// resources w, w+step, ... below f.res (receipt i goes to resource i % res,
// as prefill's SQL spreads them).
func (f *filler) resources(ctx context.Context, w, step int) error {
	for r := w; r < f.res; r += step {
		key := fmt.Sprintf("fill/%d", r+1)
		name, target := fencegate.ObjectResource("local", key), fencegate.ObjectTarget("local", key)
		g := fencegate.VerifiedGrant{Grant: fencegate.Grant{Resource: name, Owner: "fill-worker", Lease: fggateway.NewID("lease_"),
			FenceToken: 1, OperationID: fggateway.NewID("op_"), OperationRoot: fggateway.NewID("root_"), IssuedAt: 1},
			Digest: "sha256:" + randHex(32)}
		for i, seg := r, uint64(1); i < f.n; i, seg = i+f.res, seg+1 {
			now := f.start.Add(time.Duration(f.seq.Add(1)) * time.Microsecond)
			id := fggateway.NewOrderedID("rcpt_", now)
			adm, err := f.s.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: seg, Target: target, Method: "PUT",
				PayloadDigest: "sha256:" + randHex(32), PayloadSize: 1024, ReceiptID: id, Now: now})
			if err != nil {
				return fmt.Errorf("prefill %s segment %d: %w", name, seg, err)
			}
			if adm.Replay {
				return fmt.Errorf("prefill %s segment %d: admitted as a replay", name, seg)
			}
			if _, err := f.s.Settle(ctx, id, fencegate.Outcome{State: fencegate.ReceiptCommitted,
				Version: `"` + randHex(32) + "-" + randHex(8) + `"`, Now: now}); err != nil {
				return fmt.Errorf("prefill %s segment %d settle: %w", name, seg, err)
			}
		}
	}
	return nil
}

// randHex is n random bytes in hex.
func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// copyFile copies the file src to a new file dst and syncs it (the filled
// store, once per point: each point's gateway writes its own copy).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	// Synced before the gateway starts, so that the kernel's writeback of
	// the copy does not compete with the point's own fsyncs.
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
