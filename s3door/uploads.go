package s3door

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/fencegate/fencegate"
)

// The open multipart uploads of this process (multipart.go): each upload's
// staged parts and the credential that began it, bounded per credential,
// per identity and in all, their staged bytes bounded per identity (its
// share) and in all (the staging budget), and forgotten when idle or
// completed long ago.

const (
	// DefaultStagingBytes is Server.StagingBytes's default (config
	// s3StagingBytes): 32 GiB, six uploads of the largest object the
	// default maxBodyBytes (5 GiB) allows, or hundreds of the sizes the AWS
	// CLI and the SDKs send multipart (from 8 or 16 MiB up).
	DefaultStagingBytes = 32 << 30
	// MinPartCharge is the least one staged part counts against the
	// staging budget, however small it is, so that the budget bounds the
	// staged files as well as their bytes (32,768 at the default). Every
	// part but an upload's last is at least 5 MiB anyway, or Complete
	// refuses it.
	MinPartCharge = 1 << 20
)

// DefaultStagingShare is Server.StagingBytesPerIdentity's default (config
// s3StagingBytesPerIdentity) for a staging budget of budget bytes and
// objects of at most maxBody: a quarter of the budget, so that no single
// workload identity can take more than that from the others, but never less
// than one upload of the largest object and a part of it sent again (twice
// max(maxBody, MinPartCharge)), which every identity must be able to stage,
// and never more than the budget. With the defaults (32 GiB, 5 GiB) it is
// 10 GiB; where twice maxBody is the whole budget, so is the share.
func DefaultStagingShare(budget, maxBody int64) int64 {
	return min(budget, max(budget/4, LeastStaging(maxBody)))
}

// LeastStaging is the least staging an identity (and so the budget) must
// allow for objects of at most maxBody: one upload of the largest object
// and a part of it sent again, each part counting at least MinPartCharge
// (twice max(maxBody, MinPartCharge)).
func LeastStaging(maxBody int64) int64 { return 2 * max(maxBody, MinPartCharge) }

// part is one staged part of an upload.
type part struct {
	number   int
	size     int64
	etag     string // quoted hex MD5
	checksum string // the part's verified checksum of the upload's algorithm (base64), "" if none
	path     string
	at       time.Time
}

// upload is one open (or recently completed) multipart upload.
type upload struct {
	id, bucket, key, contentType string
	// identity and akid are the credential that began it: only that
	// credential (that lease) may add parts, list, complete or abort it.
	identity, akid string
	// algorithm and checksumType are CreateMultipartUpload's
	// x-amz-checksum-algorithm and x-amz-checksum-type ("" for none).
	algorithm, checksumType string
	meta                    map[string]string // the object's user metadata
	// segment is the x-amz-meta-fence-segment CreateMultipartUpload sent (0
	// for none): the segment Complete writes, since SDKs send an object's
	// metadata with the create, not with the complete.
	segment uint64
	dir     string
	created time.Time
	touched time.Time  // the last part or completion (guarded by uploads.mu)
	mu      sync.Mutex // one part write or completion at a time
	parts   map[int]*part
	// done is set once completed, doneAt then (written holding both mu and
	// uploads.mu: read under either).
	done    *completeResult
	doneAt  time.Time
	aborted bool // set (under mu) by AbortMultipartUpload before its files go
	// held is what its staged parts count against the staging budget
	// (guarded by uploads.mu); given back when its files go.
	held int64
}

// uploads are the process's open uploads by ID.
type uploads struct {
	dir string
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*upload
	// limit is the staging budget; held is what the open uploads' staged
	// parts and the parts being read (their reservations) count against it.
	limit, held int64
	// share is what one workload identity may hold of the budget; ours is
	// what each identity holds: the held of its uploads in m plus its
	// reservations in flight, so that the values of ours add up to held.
	// An identity holding nothing has no entry.
	share int64
	ours  map[string]int64
	// seen is what was last read of the leases of credentials with open
	// uploads, by access key ID (ended.go).
	seen map[string]leaseSeen
	// reading is the access key IDs whose leases a create is reading now
	// (ended.go); readsEnd is closed (and replaced) whenever such a read
	// ends, for the creates waiting on others' reads.
	reading  map[string]bool
	readsEnd chan struct{}
	// onAwait, if set (tests), is called each time a create starts waiting
	// for others' reads (awaitReads).
	onAwait func()
}

// newUploads starts with no open upload: parts a previous process staged
// (which it forgot when it stopped) are removed. limit is the staging
// budget, share what one identity may hold of it.
func newUploads(spoolDir string, now func() time.Time, limit, share int64) *uploads {
	dir := filepath.Join(spoolDir, "s3-uploads")
	_ = os.RemoveAll(dir)
	return &uploads{dir: dir, now: now, m: map[string]*upload{}, limit: limit, share: share,
		ours: map[string]int64{}, seen: map[string]leaseSeen{}, reading: map[string]bool{},
		readsEnd: make(chan struct{})}
}

// chargeOf is what a part of size bytes counts against the staging budget
// (a staged part's size is the length its reservation was made for: the
// body is held to it, so chargeOf(part.size) is what it holds).
func chargeOf(size int64) int64 { return max(size, MinPartCharge) }

// reserve takes charge bytes of the staging budget, and of identity's
// share of it, for a part about to be read, before any of it is, or refuses
// when identity would then hold more than its share or staging more than
// its budget: RESOURCE_BUSY, S3's 503 SlowDown, which AWS answers when its
// protection against resource over-consumption engages and the SDKs retry
// with backoff; the share frees as the identity's uploads complete, abort
// or go idle, the budget as anyone's do (get, just before, swept the idle
// ones). A refusal takes nothing. settle or release gives the reservation
// back.
func (us *uploads) reserve(identity string, charge int64) error {
	us.mu.Lock()
	defer us.mu.Unlock()
	// A share of the whole budget is implied by it: the budget's refusal
	// says more.
	if mine := us.ours[identity]; us.share < us.limit && mine+charge > us.share {
		return fencegate.Errorf(fencegate.CodeResourceBusy, "identity %q holds %d bytes of the S3 front door's multipart staging, its share is %d (s3StagingBytesPerIdentity) and this part counts %d: retry once its other uploads complete or abort",
			identity, mine, us.share, charge)
	}
	if us.held+charge > us.limit {
		return fencegate.Errorf(fencegate.CodeResourceBusy, "the S3 front door's multipart staging holds %d of its %d bytes (s3StagingBytes) and this part counts %d: retry once other uploads complete or abort",
			us.held, us.limit, charge)
	}
	us.take(identity, charge)
	return nil
}

// take counts n more bytes (fewer when negative) held for identity, in its
// share and in the budget; us.mu is held.
func (us *uploads) take(identity string, n int64) {
	us.held += n
	if left := us.ours[identity] + n; left != 0 {
		us.ours[identity] = left
	} else {
		delete(us.ours, identity)
	}
}

// release gives back a reservation of u's identity whose part was not
// staged.
func (us *uploads) release(u *upload, charge int64) {
	us.mu.Lock()
	us.take(u.identity, -charge)
	us.mu.Unlock()
}

// settle makes a reservation the charge of u's part that replaced one
// charged replaced (0 for none); if u was forgotten meanwhile (its files
// gone, its charge given back), the reservation is given back too.
func (us *uploads) settle(u *upload, charge, replaced int64) {
	us.mu.Lock()
	defer us.mu.Unlock()
	if us.m[u.id] != u {
		us.take(u.identity, -charge)
		return
	}
	u.held += charge - replaced
	us.take(u.identity, -replaced)
}

// completed marks u completed now with answer done, under us.mu, which the
// counts of open uploads hold to read it. u.mu is held.
func (us *uploads) completed(u *upload, done *completeResult) {
	us.mu.Lock()
	u.done, u.doneAt = done, us.now()
	us.mu.Unlock()
}

// unstaged gives back what u's parts held once its files are gone
// (completed: it stays known for a retried Complete).
func (us *uploads) unstaged(u *upload) {
	us.mu.Lock()
	us.freeLocked(u)
	us.mu.Unlock()
}

// freeLocked gives back what u's parts held, to the budget and to its
// identity's share; us.mu is held.
func (us *uploads) freeLocked(u *upload) {
	us.take(u.identity, -u.held)
	u.held = 0
}

// touch marks u used now.
func (us *uploads) touch(u *upload) {
	us.mu.Lock()
	u.touched = us.now()
	us.mu.Unlock()
}

// get returns the open (or recently completed) upload id of bucket/key
// begun by credential a; NoSuchUpload otherwise, also for another lease's.
func (us *uploads) get(id, bucket, key string, a *authed) (*upload, error) {
	us.mu.Lock()
	defer us.mu.Unlock()
	us.sweep()
	u, ok := us.m[id]
	if !ok || u.bucket != bucket || u.key != key || u.identity != a.cred.Identity || u.akid != a.cred.AccessKeyID {
		return nil, noSuchUpload("does not exist")
	}
	u.touched = us.now()
	return u, nil
}

// sweep forgets completions past completedTTL and open uploads idle past
// UploadIdle (removing their parts). us.mu is held.
func (us *uploads) sweep() {
	now := us.now()
	for k, u := range us.m {
		switch {
		case u.done != nil && now.Sub(u.doneAt) > completedTTL:
			delete(us.m, k) // its staging directory went at completion
		case u.done == nil && now.Sub(u.touched) > UploadIdle:
			delete(us.m, k)
			us.freeLocked(u)
			_ = os.RemoveAll(u.dir)
		}
	}
}

// count is the open uploads of u's credential, of its identity and of the
// process; us.mu is held.
func (us *uploads) count(u *upload) (mine, ours, all int) {
	for _, o := range us.m {
		if o.done == nil {
			all++
			if o.akid == u.akid {
				mine++
			}
			if o.identity == u.identity {
				ours++
			}
		}
	}
	return mine, ours, all
}

// add registers u unless its credential, its identity or the process has
// too many open uploads.
func (us *uploads) add(u *upload) error {
	us.mu.Lock()
	defer us.mu.Unlock()
	us.sweep()
	if mine, ours, all := us.count(u); mine >= MaxOpenUploads || ours >= MaxOpenUploadsPerIdentity || all >= MaxOpenUploadsTotal {
		return s3err(http.StatusBadRequest, "TooManyUploads", "too many open multipart uploads (at most "+
			strconv.Itoa(MaxOpenUploads)+" per credential, "+strconv.Itoa(MaxOpenUploadsPerIdentity)+" per identity, "+
			strconv.Itoa(MaxOpenUploadsTotal)+" in all): complete or abort one")
	}
	us.m[u.id] = u
	return nil
}

// abort forgets u for good: a part or completion that read its body
// meanwhile finds it aborted. u.mu is held.
func (us *uploads) abort(u *upload) {
	u.aborted = true
	us.remove(u)
}

// remove forgets u and removes its staged parts, giving back their budget.
func (us *uploads) remove(u *upload) {
	us.mu.Lock()
	delete(us.m, u.id)
	us.freeLocked(u)
	us.mu.Unlock()
	_ = os.RemoveAll(u.dir)
}

// stagedBeside is what u's parts would stage with part n of size bytes in
// place of the one staged under n, if any; u.mu is held.
func (u *upload) stagedBeside(n int, size int64) int64 {
	for pn, p := range u.parts {
		if pn != n {
			size += p.size
		}
	}
	return size
}
