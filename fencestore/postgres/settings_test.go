package postgres_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/fencestore/postgres"
	"github.com/fencegate/fencegate/internal/testenv"
)

// Rule: the store refuses to start where commits are not durable
// (synchronous_commit off, here set for the session as a role or database
// default would be): an admission it answered could be lost in a crash
// after its effect was forwarded.
func TestOpenRefusesSynchronousCommitOff(t *testing.T) {
	dsn := testenv.WithParam(t, testenv.PostgresURL(t), "synchronous_commit", "off")
	s, err := postgres.Open(context.Background(), dsn)
	if err == nil {
		s.Close()
		t.Fatal("Open accepted a server with synchronous_commit off")
	}
	if fencegate.ErrorCode(err) != fencegate.CodeUnsupported || !strings.Contains(err.Error(), "synchronous_commit") {
		t.Fatalf("Open: %v, want UNSUPPORTED naming synchronous_commit", err)
	}
	if n := testenv.SchemaTables(t, dsn); n != 0 {
		t.Fatalf("the refused Open left %d tables: it migrated before it checked", n)
	}
	for _, v := range []string{"on", "local", "remote_write"} {
		s := open(t, testenv.WithParam(t, testenv.PostgresURL(t), "synchronous_commit", v))
		s.Close()
	}
}

// Rule: the store refuses a server that runs with fsync off (a server
// setting, so a server of its own): a commit it answered is not on disk.
func TestOpenRefusesAServerWithFsyncOff(t *testing.T) {
	pg := testenv.OwnPostgres(t, testenv.PostgresSetting("fsync", "off"))
	s, err := postgres.Open(context.Background(), pg.URL())
	if err == nil {
		s.Close()
		t.Fatal("Open accepted a server with fsync off")
	}
	if fencegate.ErrorCode(err) != fencegate.CodeUnsupported || !strings.Contains(err.Error(), "fsync") {
		t.Fatalf("Open: %v, want UNSUPPORTED naming fsync", err)
	}
	if n := testenv.SchemaTables(t, pg.URL()); n != 0 {
		t.Fatalf("the refused Open left %d tables", n)
	}
}

// Rule: the store's transactions run READ COMMITTED whatever the server's
// or role's default, so concurrent admissions on distinct resources all
// commit (a serializable default would fail them with serialization errors).
func TestAdmissionsCommitUnderAStricterDefaultIsolation(t *testing.T) {
	s := open(t, testenv.WithParam(t, testenv.PostgresURL(t), "default_transaction_isolation", "serializable"))
	defer s.Close()
	ctx := context.Background()
	now := time.UnixMilli(1_700_000_000_000).UTC()
	const n = 16
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			res := fmt.Sprint("res/", i)
			g := fencegate.VerifiedGrant{Grant: fencegate.Grant{Resource: res, Owner: "o", Lease: fmt.Sprint("l", i), FenceToken: 1,
				OperationID: "op", OperationRoot: "r", IssuedAt: 1}, Digest: fmt.Sprint("sha256:g", i)}
			adm, err := s.Admit(ctx, fencegate.AdmitRequest{Grant: g, Segment: 1, Target: res, Method: "PUT",
				PayloadDigest: "sha256:p", ReceiptID: fmt.Sprint("r", i), Now: now})
			if err == nil {
				_, err = s.Settle(ctx, adm.Receipt.ID, fencegate.Outcome{State: fencegate.ReceiptCommitted, Version: "v1", Now: now})
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("resource %d: %v", i, err)
		}
	}
}
