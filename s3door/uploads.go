package s3door

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// The open multipart uploads of this process (multipart.go): each upload's
// staged parts and the credential that began it, bounded per credential,
// per identity and in all, and forgotten when idle or completed long ago.

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
	done    *completeResult // set once completed
	doneAt  time.Time
	aborted bool // set (under mu) by AbortMultipartUpload before its files go
}

// uploads are the process's open uploads by ID.
type uploads struct {
	dir string
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*upload
}

// newUploads starts with no open upload: parts a previous process staged
// (which it forgot when it stopped) are removed.
func newUploads(spoolDir string, now func() time.Time) *uploads {
	dir := filepath.Join(spoolDir, "s3-uploads")
	_ = os.RemoveAll(dir)
	return &uploads{dir: dir, now: now, m: map[string]*upload{}}
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
		return nil, noSuchUpload()
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
			_ = os.RemoveAll(u.dir)
		}
	}
}

// add registers u unless its credential or the process has too many open
// uploads.
func (us *uploads) add(u *upload) error {
	us.mu.Lock()
	defer us.mu.Unlock()
	us.sweep()
	mine, ours, all := 0, 0, 0
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
	if mine >= MaxOpenUploads || ours >= MaxOpenUploadsPerIdentity || all >= MaxOpenUploadsTotal {
		return s3err(http.StatusBadRequest, "TooManyUploads", "too many open multipart uploads (at most "+
			strconv.Itoa(MaxOpenUploads)+" per credential, "+strconv.Itoa(MaxOpenUploadsPerIdentity)+" per identity, "+
			strconv.Itoa(MaxOpenUploadsTotal)+" in all): complete or abort one")
	}
	us.m[u.id] = u
	return nil
}

func (us *uploads) remove(u *upload) {
	us.mu.Lock()
	delete(us.m, u.id)
	us.mu.Unlock()
	_ = os.RemoveAll(u.dir)
}
