package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/embedded"
	fggateway "github.com/fencegate/fencegate/gateway"
)

// prefillEmbedded writes n settled receipts into a new embedded fence store
// file at path, spread over n/10 resources (segments 1..10 of fence 1 each,
// with their bindings and versions), as `gateway dev` leaves a store that
// has served n writes: through the store's own Admit and Settle (so every
// index a write maintains is filled), with time-ordered receipt IDs as the
// gateway makes them (fggateway.NewOrderedID), created a day before now.
// Many writers share the store's group commit, so filling costs about one
// commit per a few hundred receipts.
func prefillEmbedded(ctx context.Context, path string, n int) error {
	s, err := embedded.Open(path)
	if err != nil {
		return err
	}
	res := max(1, n/10)
	const writers = 512
	start := time.Now().Add(-24 * time.Hour)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fillResources(ctx, s, w, writers, res, n, start); err != nil {
				mu.Lock()
				firstErr = errors.Join(firstErr, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(firstErr, s.Close())
}

// fillResources admits and settles, in segment order, the receipts of the
// resources w, w+step, ... below res (receipt i goes to resource i % res, as
// prefill's SQL spreads them).
func fillResources(ctx context.Context, s *embedded.Store, w, step, res, n int, start time.Time) error {
	for r := w; r < res; r += step {
		key := fmt.Sprintf("fill/%d", r+1)
		name, target := fencegate.ObjectResource("local", key), fggateway.ObjectTarget("local", key)
		g := fencegate.VerifiedGrant{Grant: fencegate.Grant{Resource: name, Owner: "fill", Lease: "lease-fill",
			FenceToken: 1, OperationID: "op-fill-" + name, OperationRoot: "root", IssuedAt: 1}, Digest: "sha256:g"}
		for i, seg := r, uint64(1); i < n; i, seg = i+res, seg+1 {
			now := start.Add(time.Duration(i) * time.Microsecond)
			id := fggateway.NewOrderedID("rcpt_", now)
			adm, err := s.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: seg, Target: target, Method: "PUT",
				PayloadDigest: "sha256:p", ReceiptID: id, Now: now})
			if err != nil {
				return fmt.Errorf("prefill %s segment %d: %w", name, seg, err)
			}
			if adm.Replay {
				return fmt.Errorf("prefill %s segment %d: admitted as a replay", name, seg)
			}
			if _, err := s.Settle(ctx, id, fencegate.Outcome{State: fencegate.ReceiptCommitted,
				Version: fmt.Sprintf("v%d", i), Now: now}); err != nil {
				return fmt.Errorf("prefill %s segment %d settle: %w", name, seg, err)
			}
		}
	}
	return nil
}

// copyFile copies the file src to a new file dst (the filled store, once
// per point: each point's gateway writes its own copy).
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
	return out.Close()
}
