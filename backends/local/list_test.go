package local_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/objecttest"
)

// Rule: List, like Head, shows a Delete only once it is durable. A listing
// that reads the directory while the Delete's directory fsync runs waits
// for it; when that fsync fails (a crash may undo the unlink) the listing
// is BACKEND_UNAVAILABLE until a fresh fsync succeeds, never the object
// gone.
func TestListShowsADeleteOnlyOnceItsDirectoryFsyncSucceeded(t *testing.T) {
	s := open(t)
	defer func() { _ = s.Close() }()
	ctx := context.Background()
	etag := objecttest.Create(t, s, "k/d", "v1")
	var (
		mu      sync.Mutex
		syncErr error // what the directory fsyncs after the Delete's answer
		calls   int
	)
	entered, release := make(chan struct{}), make(chan struct{})
	local.SetDirSync(s, func(string) error {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first { // the Delete's: held, then failed
			close(entered)
			<-release
			return errors.New("fsync: input/output error")
		}
		mu.Lock()
		defer mu.Unlock()
		return syncErr
	})
	waiting := make(chan struct{})
	local.SetListWait(s, func() { close(waiting) })
	deleted := make(chan error, 1)
	go func() { deleted <- s.Delete(ctx, "k/d", etag) }()
	<-entered
	mu.Lock()
	syncErr = errors.New("fsync: input/output error")
	mu.Unlock()
	type answer struct {
		infos []fencegate.ObjectInfo
		err   error
	}
	listed := make(chan answer, 1)
	go func() {
		infos, _, err := s.List(ctx, "k/", "", -1)
		listed <- answer{infos, err}
	}()
	select {
	case a := <-listed:
		close(release)
		t.Fatalf("List answered while the Delete's directory fsync ran: %+v %v", a.infos, a.err)
	case <-waiting:
	}
	close(release)
	if err := <-deleted; err == nil {
		t.Fatal("a Delete whose directory fsync failed answered success")
	}
	if a := <-listed; fencegate.ErrorCode(a.err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("List after the Delete's directory fsync failed (and fsyncs still fail): %+v %v, want BACKEND_UNAVAILABLE", a.infos, a.err)
	}
	mu.Lock()
	syncErr = nil
	mu.Unlock()
	if infos, _, err := s.List(ctx, "k/", "", -1); err != nil || len(infos) != 0 {
		t.Fatalf("List once a directory fsync succeeds: %+v %v, want k/d gone (its unlink is durable now)", infos, err)
	}
}
