package local_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/backends/local"
	"github.com/fencegate/fencegate/backends/objecttest"
)

// gatedBody is a Put body whose first Read reports on started and then
// waits for release.
type gatedBody struct {
	*strings.Reader
	started, release chan struct{}
	once             atomic.Bool
}

func newGatedBody(s string) *gatedBody {
	return &gatedBody{Reader: strings.NewReader(s), started: make(chan struct{}), release: make(chan struct{})}
}

func (b *gatedBody) Read(p []byte) (int, error) {
	if b.once.CompareAndSwap(false, true) {
		close(b.started)
		<-b.release
	}
	return b.Reader.Read(p)
}

func gatedPut(s *local.Store, key string, body *gatedBody) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.Put(context.Background(), fencegate.PutRequest{Key: key, Body: body, Size: int64(body.Len()),
			ContentType: "text/plain", IfNoneMatch: true, Meta: objecttest.Meta(1)})
		done <- err
	}()
	return done
}

// Rule: Close never closes the descriptors under a running operation: it
// returns only after the Put that was reading its body has finished, and
// that Put lands durably (a closed directory descriptor's number could be
// reused by another open, and the Put's directory fsync land on that file).
func TestCloseWaitsForTheRunningPut(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	body := newGatedBody("landed while closing")
	putDone := gatedPut(s, "k/closing", body)
	<-body.started

	// The Put cannot finish before its body is released, so a Close that
	// returns before the release did not wait for it. (Comparing when Close
	// and the test's receive of the Put's answer return is not that: Close
	// may rightly return between the Put's end and that receive.)
	var released atomic.Bool
	closeDone := make(chan bool, 1) // whether Close returned after the release
	closeErr := make(chan error, 1)
	go func() {
		err := s.Close()
		closeDone <- released.Load()
		closeErr <- err
	}()
	released.Store(true)
	close(body.release)
	if err := <-putDone; err != nil {
		t.Fatalf("put running while the store closed: %v", err)
	}
	if !<-closeDone {
		t.Fatalf("Close returned before the Put it should wait for")
	}
	if err := <-closeErr; err != nil {
		t.Fatalf("close: %v", err)
	}
	got, _ := objecttest.Content(t, openAt(t, dir), "k/closing")
	if got != "landed while closing" {
		t.Fatalf("after reopen the object holds %q", got)
	}
}

// Rule: when operations outlive Close's wait, Close closes nothing and says
// so: the running Put still completes correctly on its own descriptors.
func TestCloseThatTimesOutLeavesDescriptorsToTheRunningPut(t *testing.T) {
	defer local.SetCloseWait(0)()
	s := openAt(t, t.TempDir())
	body := newGatedBody("still mine")
	putDone := gatedPut(s, "k/outlived", body)
	<-body.started
	err := s.Close()
	if err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("Close with a Put running answered %v, want an error naming the running operation", err)
	}
	close(body.release)
	if err := <-putDone; err != nil {
		t.Fatalf("put that outlived Close: %v", err)
	}
	// The store refuses new work, but its descriptors stayed valid for the Put.
	_, _, err = s.Get(context.Background(), "k/outlived")
	if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable {
		t.Fatalf("get after Close: %v, want BACKEND_UNAVAILABLE", err)
	}
}

// Rule: every operation begun after Close is refused with
// BACKEND_UNAVAILABLE and changes nothing; a second Close does nothing.
func TestOperationsAfterCloseAreRefused(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir)
	etag := objecttest.Create(t, s, "k/kept", "kept")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ctx := context.Background()
	_, perr := objecttest.Replace(s, "k/kept", etag, "changed", objecttest.Meta(2))
	derr := s.Delete(ctx, "k/kept", etag)
	_, herr := s.Head(ctx, "k/kept")
	_, _, gerr := s.Get(ctx, "k/kept")
	_, _, lerr := s.List(ctx, "k/", "", 10)
	for name, err := range map[string]error{"put": perr, "delete": derr, "head": herr, "get": gerr, "list": lerr} {
		if fencegate.ErrorCode(err) != fencegate.CodeBackendUnavailable || !strings.Contains(err.Error(), "closed") {
			t.Errorf("%s after Close: %v, want BACKEND_UNAVAILABLE (closed)", name, err)
		}
	}
	got, info := objecttest.Content(t, openAt(t, dir), "k/kept")
	if got != "kept" || info.ETag != etag {
		t.Fatalf("after refused operations the object is %q %s, want kept %s", got, info.ETag, etag)
	}
}
