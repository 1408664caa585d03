package main

import (
	"encoding/json"
	"os"
	"time"

	"github.com/fencegate/fencegate/client"
)

// leaseFile is what acquire leaves for later verbs: the lease with its grant
// and latest status proof, the TTL, and the next segment number.
type leaseFile struct {
	Gateway     string           `json:"gateway"`
	TTLMs       int64            `json:"ttlMs"`
	NextSegment uint64           `json:"nextSegment"`
	Lease       client.LeaseInfo `json:"lease"`
}

func loadLease(path string) (*leaseFile, error) {
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

// save writes the file readable by its owner only (it holds a grant).
func (lf *leaseFile) save(path string) error {
	b, err := json.MarshalIndent(lf, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return localError{"write lease file: " + err.Error(), err}
	}
	return os.Rename(tmp, path)
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

// proofFresh reports whether the status proof still has a second to live.
func (lf *leaseFile) proofFresh(now time.Time) bool {
	e := lf.Lease.StatusExpiresAt
	return lf.Lease.StatusProof != "" && e != nil && now.Add(time.Second).Before(*e)
}
