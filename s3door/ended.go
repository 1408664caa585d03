package s3door

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// The open uploads of leases that have ended. They count against the bounds
// on open uploads (MaxOpenUploads and the others) until the idle sweep, so
// before a CreateMultipartUpload is refused TooManyUploads the front door
// asks about the leases whose uploads stand in its way, through
// Server.Credentials as it does for every request, and discards the uploads
// of those that have ended as an abort would (their staged parts removed,
// their staging bytes given back), then counts again. Only a lease read
// RELEASED or EXPIRED, or no longer known, is given up: it never holds
// again, so it is remembered as ended. One read HELD or REVOKED (which a
// registry paused after a coordination state loss reads every lease, and
// which may read HELD again) keeps its uploads and is not asked about again
// within statusRecheck. One that cannot be read now keeps its uploads and
// ends the create's reads (a registry that cannot be asked would make each
// of the others wait too), as does statusBudget spent on them; it is asked
// about again at the next create, after the leases not tried for longest,
// so that one lease whose read keeps failing does not hide the others. One
// create asks about at most maxStatusReads leases, each once, and waits
// (within statusBudget) for the reads other creates are making of leases
// in its way.

const (
	// maxStatusReads bounds the leases one CreateMultipartUpload at a bound
	// asks about.
	maxStatusReads = 16
	// statusBudget bounds the time one CreateMultipartUpload at a bound
	// spends reading leases (Server.statusBudget in tests).
	statusBudget = 2 * time.Second
	// statusRecheck is how long a lease read HELD or REVOKED is taken to be
	// so: its uploads count, unasked, until then.
	statusRecheck = time.Minute
)

// leaseSeen is what the last read of a credential's lease said.
type leaseSeen struct {
	// ended: RELEASED, EXPIRED or no longer known, which never holds again,
	// so its uploads may go and it is not read again. REVOKED is not: a
	// registry whose grants are paused after a coordination state loss
	// reads every lease REVOKED, and the lease may read HELD again.
	ended bool
	// failed: the read failed; at only orders the next reads (this one
	// after those tried longer ago) and does not hold it back.
	failed bool
	at     time.Time // when it was read or tried
}

// leaseEnded reports whether c is the credential of a lease that is no
// longer HELD (a credential that is no lease's, State "", never ends).
func leaseEnded(c fencegate.S3Credential) bool {
	return c.State != "" && c.State != fencegate.StateHeld
}

// leaseGone reports whether c's lease was read RELEASED or EXPIRED, which
// never holds again (REVOKED may: leaseSeen).
//
// REVOKED is never taken for gone, even a revocation for good (a lease from
// before a state loss, once the registry has claimed the backend again):
// the answer cannot tell it from a paused registry's REVOKED, or from one of
// a revoked signing epoch, both of which may read HELD again. The credential
// carries State, a grant and a status proof, and none of them says why: the
// status proof states only REVOKED, and the grant's expiresAt is its
// acquisition plus its TTL, not the lease's expiry after renewals, so a
// lease renewed and then paused may be past it and still hold again. None is
// needed for the one safe rule, the lease's own expiry having passed: the
// registry states REVOKED only for a lease its backend reads HELD, whose
// expiry has not passed, and renews no lease from before a loss (nor any
// while paused), so such a lease reads EXPIRED from its expiry on (within
// the registry's maxTTL of its last renewal) and is discarded by the first
// create at a bound that reads it after statusRecheck (registry test
// TestS3ResolutionOfARevokedLeaseReadsExpiredOnceItsExpiryPassed).
func leaseGone(c fencegate.S3Credential) bool {
	return c.State == fencegate.StateReleased || c.State == fencegate.StateExpired
}

// makeRoom discards the open uploads of ended leases that keep u out of a
// bound on open uploads, and logs how many went and whose (the access key
// IDs of their leases). The leases are read with s.Credentials: a
// credential the registry no longer knows (NOT_FOUND, its lease forgotten)
// can make no request, so its uploads go too; a read that fails keeps
// them, and ends the reads (the registry cannot be asked now), as does
// statusBudget spent. An upload is kept whatever its lease while a request
// holds its lock (a part being put in place once its body is read, a
// completion being admitted), or while its resource is in shadow mode,
// where an ended lease still stages and completes (the refusal is only
// recorded). A part whose body is still arriving, or a completion whose
// document is, holds no lock: it finds the upload gone and answers
// NoSuchUpload, as does its lease's abort, as after the idle sweep.
func (s *Server) makeRoom(ctx context.Context, u *upload) {
	us := s.uploads
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(s.statusBudget, statusBudget))
	defer cancel()
	s.readLeases(ctx, us.toRead(u))
	us.awaitReads(ctx, u)
	n, of := 0, map[string]bool{}
	for _, o := range us.ofEnded(u) {
		if s.Gateway.Modes().For(fencegate.ObjectResource(o.bucket, o.key)) == gateway.Shadow {
			continue
		}
		if us.discard(o) {
			n, of[o.akid] = n+1, true
		}
	}
	if n > 0 {
		s.Log.InfoContext(ctx, "s3 uploads of ended leases discarded to make room", "uploads", n,
			"access_key_ids", slices.Sorted(maps.Keys(of)))
	}
}

// readLeases reads the leases of akids, claimed by toRead, in turn and
// records what each said (us.saw), until ctx ends or a read fails other
// than NOT_FOUND (the registry cannot be asked now: the others would wait
// on it too); the claims of those left unread are given back, also if a
// read panics.
func (s *Server) readLeases(ctx context.Context, akids []string) {
	us, asked := s.uploads, 0
	defer func() { us.unclaim(akids[asked:]) }()
	for _, akid := range akids {
		if ctx.Err() != nil {
			return
		}
		c, err := s.Credentials.LookupS3(ctx, akid)
		asked++
		if err != nil && fencegate.ErrorCode(err) != fencegate.CodeNotFound {
			us.saw(akid, leaseSeen{failed: true})
			return
		}
		us.saw(akid, leaseSeen{ended: err != nil || leaseGone(c)}) // NOT_FOUND: its lease forgotten
	}
}

// crowd is which open uploads would make room for u if they went: none
// while u's own credential is at its bound (its lease is the live one
// asking) or no bound is met; those of u's identity's other credentials
// when its identity's bound is met (which makes room in the process's too);
// any other credential's when only the process's is. us.mu is held.
func (us *uploads) crowd(u *upload) func(o *upload) bool {
	mine, ours, all := us.count(u)
	switch {
	case mine >= MaxOpenUploads:
		return nil
	case ours >= MaxOpenUploadsPerIdentity:
		return func(o *upload) bool { return o.done == nil && o.akid != u.akid && o.identity == u.identity }
	case all >= MaxOpenUploadsTotal:
		return func(o *upload) bool { return o.done == nil && o.akid != u.akid }
	}
	return nil
}

// toRead is the credentials whose leases makeRoom asks about for u: of
// those with uploads in crowd(u), the ones not known ended for good nor
// read within statusRecheck nor being read for another create, those read
// longest ago (never first) and with the oldest uploads first, at most
// maxStatusReads. It claims them (us.reading) until saw or unclaim, so
// that creates refused together read each lease once. What was seen of
// credentials with no open upload left is forgotten.
func (us *uploads) toRead(u *upload) []string {
	us.mu.Lock()
	defer us.mu.Unlock()
	us.sweep()
	open := map[string]bool{}
	for _, o := range us.m {
		if o.done == nil {
			open[o.akid] = true
		}
	}
	for k := range us.seen {
		if !open[k] {
			delete(us.seen, k)
		}
	}
	in := us.crowd(u)
	if in == nil {
		return nil
	}
	oldest := map[string]time.Time{}
	now := us.now()
	for _, o := range us.m {
		if !in(o) {
			continue
		}
		if seen, ok := us.seen[o.akid]; us.reading[o.akid] || ok && !seen.failed && (seen.ended || now.Sub(seen.at) < statusRecheck) {
			continue
		}
		if t, ok := oldest[o.akid]; !ok || o.touched.Before(t) {
			oldest[o.akid] = o.touched
		}
	}
	read := make([]string, 0, len(oldest))
	for k := range oldest {
		read = append(read, k)
	}
	sort.Slice(read, func(i, j int) bool {
		a, b := us.seen[read[i]].at, us.seen[read[j]].at
		if !a.Equal(b) {
			return a.Before(b)
		}
		if ta, tb := oldest[read[i]], oldest[read[j]]; !ta.Equal(tb) {
			return ta.Before(tb)
		}
		return read[i] < read[j]
	})
	read = read[:min(len(read), maxStatusReads)]
	for _, k := range read {
		us.reading[k] = true
	}
	return read
}

// saw records a read (or a failed try) of akid's lease, claimed by
// toRead, now.
func (us *uploads) saw(akid string, seen leaseSeen) {
	us.mu.Lock()
	seen.at = us.now()
	us.seen[akid] = seen
	us.unclaimLocked(akid)
	us.mu.Unlock()
}

// unclaim gives back the claims toRead made on akids, left unread.
func (us *uploads) unclaim(akids []string) {
	us.mu.Lock()
	us.unclaimLocked(akids...)
	us.mu.Unlock()
}

// unclaimLocked gives back claims and wakes the creates waiting on them
// (awaitReads). us.mu is held.
func (us *uploads) unclaimLocked(akids ...string) {
	if len(akids) == 0 {
		return
	}
	for _, k := range akids {
		delete(us.reading, k)
	}
	close(us.readsEnd)
	us.readsEnd = make(chan struct{})
}

// awaitReads waits, until ctx ends, while another create is reading a
// lease whose uploads are in u's way, so that creates refused together all
// count again after its reads (which found those leases ended or not).
func (us *uploads) awaitReads(ctx context.Context, u *upload) {
	for {
		us.mu.Lock()
		in, wait := us.crowd(u), us.readsEnd
		pending := false
		for _, o := range us.m {
			if in != nil && in(o) && us.reading[o.akid] {
				pending = true
				break
			}
		}
		hook := us.onAwait
		us.mu.Unlock()
		if !pending {
			return
		}
		if hook != nil {
			hook()
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return
		}
	}
}

// ofEnded is the uploads in crowd(u) whose credential's lease was read
// ended.
func (us *uploads) ofEnded(u *upload) []*upload {
	us.mu.Lock()
	defer us.mu.Unlock()
	in := us.crowd(u)
	if in == nil {
		return nil
	}
	var out []*upload
	for _, o := range us.m {
		if in(o) && us.seen[o.akid].ended {
			out = append(out, o)
		}
	}
	return out
}

// discard forgets o as its abort would, unless a request holds o.mu (a
// part being put in place, a completion being admitted) or it is completed
// or gone already; it reports whether o went.
func (us *uploads) discard(o *upload) bool {
	if !o.mu.TryLock() {
		return false
	}
	defer o.mu.Unlock()
	us.mu.Lock()
	open := us.m[o.id] == o
	us.mu.Unlock()
	if !open || o.done != nil || o.aborted {
		return false
	}
	us.abort(o)
	return true
}
