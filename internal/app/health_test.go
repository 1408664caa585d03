package app

import (
	"errors"
	"net/http"
	"testing"

	"github.com/fencegate/fencegate"
)

// failedStore stands for a fence store that failed for good, as the
// embedded store does after a failed commit (embedded.Store.Failure).
type failedStore struct{ err error }

func (f failedStore) Failure() error { return f.err }

// Rule: /healthz answers 200 while the gateway is ready and its fence store
// has not failed; 503 BACKEND_UNAVAILABLE once the store reports a failed
// commit (the embedded store serves nothing until reopened, so an
// orchestrator must restart the gateway), and while the gateway is not
// ready. The binary's own embedded store is the one it watches.
func TestHealthzFollowsReadinessAndTheFenceStoresFailure(t *testing.T) {
	rw := newRouteWorld(t)
	if rw.app.failing == nil {
		t.Fatal("the dev binary's embedded fence store is not watched for a failed commit")
	}
	if code, m := rw.do("GET", "/healthz", "", nil, ""); code != http.StatusOK {
		t.Fatalf("healthz of a ready gateway: %d %v", code, m)
	}
	rw.app.failing = failedStore{fencegate.Wrap(errors.New("fdatasync: input/output error"), fencegate.CodeBackendUnavailable, "commit failed")}
	if code, m := rw.do("GET", "/healthz", "", nil, ""); code != http.StatusServiceUnavailable || m["code"] != "BACKEND_UNAVAILABLE" {
		t.Fatalf("healthz after the fence store failed: %d %v, want 503 BACKEND_UNAVAILABLE", code, m)
	}
	rw.app.failing = failedStore{}
	rw.app.ready.Store(false)
	if code, m := rw.do("GET", "/healthz", "", nil, ""); code != http.StatusServiceUnavailable || m["code"] != "BACKEND_UNAVAILABLE" {
		t.Fatalf("healthz of a gateway that is not ready: %d %v, want 503 BACKEND_UNAVAILABLE", code, m)
	}
}
