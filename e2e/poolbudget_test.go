package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testenv"
)

// TestPoolBudgetUnderThreeStopsTheBinaryBeforeItMigrates: a Postgres fence
// store URL whose pool_max_conns leaves reads no connection of their own
// (under 3) stops the built gateway at start with INVALID_REQUEST and the
// reason, before it creates anything in the database: the schema stays
// empty.
func TestPoolBudgetUnderThreeStopsTheBinaryBeforeItMigrates(t *testing.T) {
	dsn := testenv.PostgresURL(t)
	dir := t.TempDir()
	cmd := exec.Command(binary(t), "dev", "--data-dir", filepath.Join(dir, "data"), "--addr", freePort(t), "--identity", "w=t",
		"--fence-store", dsn+"&pool_max_conns=2")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() == 0 {
		t.Fatalf("gateway started with pool_max_conns=2 (err %v):\n%s", err, out)
	}
	if !strings.Contains(string(out), "INVALID_REQUEST: Postgres URL: pool_max_conns is 2, at least 3") {
		t.Errorf("output lacks the reason:\n%s", out)
	}
	if tables := testenv.SchemaTables(t, dsn); tables != 0 {
		t.Errorf("the refused start left %d tables in the store's schema", tables)
	}
}
