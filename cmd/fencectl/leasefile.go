package main

import (
	"encoding/json"
	"os"
	"syscall"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/client"
)

// leaseFile is what acquire leaves for later verbs: the lease with its grant
// and latest status proof, the TTL, the next segment number, and the write
// in doubt the next write must settle first, if any (doubt.go).
type leaseFile struct {
	Gateway     string           `json:"gateway"`
	TTLMs       int64            `json:"ttlMs"`
	NextSegment uint64           `json:"nextSegment"`
	Doubt       *segmentDoubt    `json:"doubt,omitempty"`
	Lease       client.LeaseInfo `json:"lease"`

	lock *os.File // the lease file's lock, held from load to close
}

// lockLease takes the exclusive lock of the lease file at path (flock on
// path.lock, waiting for another fencectl that holds it): verbs that read
// the file, call the gateway and write the file back run one at a time, so
// that two writes never take one segment and a status never writes back a
// next segment older than a write's.
func lockLease(path string) (*os.File, error) {
	f, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, localError{"lock the lease file: " + err.Error(), err}
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, localError{"lock the lease file: " + err.Error(), err}
	}
	return f, nil
}

// loadLease locks and reads the lease file at path; close releases it.
func loadLease(path string) (*leaseFile, error) {
	lock, err := lockLease(path)
	if err != nil {
		return nil, err
	}
	lf, err := readLease(path)
	if err != nil {
		lock.Close()
		return nil, err
	}
	lf.lock = lock
	return lf, nil
}

// readLease reads the lease file at path without its lock: a snapshot
// (the file is only ever replaced whole, by rename).
func readLease(path string) (*leaseFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, localError{"no lease file " + path + "; run 'fencectl acquire' first", err}
	}
	var lf leaseFile
	if err := json.Unmarshal(b, &lf); err != nil {
		return nil, localError{"lease file " + path + " is not valid: " + err.Error(), err}
	}
	return &lf, nil
}

// close releases the lease file's lock (nil-safe, idempotent).
func (lf *leaseFile) close() {
	if lf != nil && lf.lock != nil {
		lf.lock.Close()
		lf.lock = nil
	}
}

// writeFile is authority.WriteFileAtomic (a variable for tests to fail).
var writeFile = authority.WriteFileAtomic

// save replaces the file atomically and durably, readable by its owner
// only (it holds a grant): authority.WriteFileAtomic's temporary file of
// its own, synced, renamed over path, the directory synced.
func (lf *leaseFile) save(path string) error {
	b, err := json.MarshalIndent(lf, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFile(path, append(b, '\n'), 0o600); err != nil {
		return localError{"write lease file: " + err.Error(), err}
	}
	return nil
}

// update keeps a newer registry answer, keeping the grant if it has none.
func (lf *leaseFile) update(info client.LeaseInfo) {
	if info.Grant == "" {
		info.Grant, info.GrantDigest = lf.Lease.Grant, lf.Lease.GrantDigest
	}
	if info.StatusProof == "" {
		info.StatusProof, info.StatusExpiresAt = lf.Lease.StatusProof, lf.Lease.StatusExpiresAt
	}
	lf.Lease = info
}

// newer reports whether info, an answer about the file's lease got without
// the file's lock, may replace what the file holds now: never a HELD over
// an ended lease (a release saved meanwhile, whose answer came later from
// the registry). Between two HELD answers the later one saved wins: a
// renewal may shorten the lease (renew --ttl), so expiry is no order.
func (lf *leaseFile) newer(info client.LeaseInfo) bool {
	cur := lf.Lease.State
	return cur == fencegate.StateHeld || cur == "" || info.State != fencegate.StateHeld
}

// proofFresh reports whether the status proof still has a second to live.
func (lf *leaseFile) proofFresh(now time.Time) bool {
	e := lf.Lease.StatusExpiresAt
	return lf.Lease.StatusProof != "" && e != nil && now.Add(time.Second).Before(*e)
}
