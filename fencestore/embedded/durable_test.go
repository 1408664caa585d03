package embedded

import (
	"context"
	"errors"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/fencegate/fencegate"
)

// holdCommit makes the store's next commit stop after bbolt's Commit has
// returned, where a real commit sits between its meta page and its
// fdatasync: the batch is in the mmap, not yet durable. It returns a
// channel closed once the commit is held there, and release, which lets it
// end with syncErr (nil: the sync succeeded). release may be called twice.
func holdCommit(s *Store, syncErr error) (held <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	real := s.batch.commitTx
	var once sync.Once
	s.batch.commitTx = func(tx *bolt.Tx) error {
		if err := real(tx); err != nil {
			return err
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		close(in)
		<-out
		return syncErr
	}
	var rel sync.Once
	return in, func() { rel.Do(func() { close(out) }) }
}

// Rule: readers are never told of a batch before it is durable. A read that
// begins while a commit is between its meta page and its sync waits for the
// commit to return: it then answers the batch if the sync succeeded, and
// BACKEND_UNAVAILABLE if it failed (the admission may not exist after a
// crash), never the receipt in between.
func TestAReadDuringACommitAnswersOnlyOnceTheCommitIsDurable(t *testing.T) {
	for _, c := range []struct {
		name    string
		syncErr error
	}{
		{"sync succeeds", nil},
		{"sync fails", errors.New("fdatasync: input/output error")},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s := openTemp(t)
			if _, err := s.Admit(ctx, admitReq("res/a", 1, "r-1")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Settle(ctx, "r-1", fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1"}); err != nil {
				t.Fatal(err)
			}
			waiting := make(chan struct{})
			s.batch.onReadWait = func() { close(waiting) }
			held, release := holdCommit(s, c.syncErr)
			defer release()
			admitted := make(chan error, 1)
			go func() {
				_, err := s.Admit(ctx, admitReq("res/a", 2, "r-2"))
				admitted <- err
			}()
			<-held
			type answer struct {
				r   fencegate.Receipt
				err error
			}
			read := make(chan answer, 1)
			go func() {
				r, err := s.Receipt(ctx, "r-2")
				read <- answer{r, err}
			}()
			select {
			case a := <-read:
				t.Fatalf("a read begun while r-2's commit was not yet durable answered at once: %+v, %v", a.r, a.err)
			case <-waiting:
			}
			release()
			aerr := <-admitted
			a := <-read
			if c.syncErr == nil {
				if aerr != nil || a.err != nil || a.r.ID != "r-2" {
					t.Fatalf("after a durable commit: admit %v, read %+v %v; want r-2", aerr, a.r, a.err)
				}
				return
			}
			if aerr == nil {
				t.Fatal("the admission whose sync failed was answered as admitted")
			}
			if fencegate.ErrorCode(a.err) != fencegate.CodeBackendUnavailable {
				t.Fatalf("a read that waited for a commit whose sync failed: %+v %v, want BACKEND_UNAVAILABLE", a.r, a.err)
			}
		})
	}
}

// Rule: the read barrier is held only while a commit writes and syncs, not
// while a batch's ops run: a read during a batch answers at once, with the
// state before the batch (and an op reading inside its transaction never
// waits on the barrier its own commit takes).
func TestAReadDuringABatchsOpsDoesNotWait(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	if _, err := s.Admit(ctx, admitReq("res/a", 1, "r-1")); err != nil {
		t.Fatal(err)
	}
	release := hold(t, s)
	defer release()
	s.batch.onReadWait = func() { t.Error("a read waited for the barrier while no commit was in flight") }
	rs, err := s.Resource(ctx, "res/a")
	if err != nil || rs.LastSegmentSeq != 1 {
		t.Fatalf("a read while a batch's ops run: %+v %v, want segment 1", rs, err)
	}
}
