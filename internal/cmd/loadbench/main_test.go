package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilt()
	os.Exit(code)
}

// TestSmokeEmbeddedPointPrintsRatio runs the embedded path for half a second
// at c=1 against the built gateway: the row names a nonzero rate for the
// gateway and for the baseline, and their ratio. It checks that the bench
// runs, not how fast anything is.
func TestSmokeEmbeddedPointPrintsRatio(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), options{paths: []string{"embedded"}, conc: []int{1}, d: 500 * time.Millisecond,
		runs: 1, bin: testenv.GatewayBinary(t), out: &out})
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^embedded +1 +([0-9]+) .*\| bbolt\+file +([0-9]+) .*\| +([0-9.]+)x \|`).FindStringSubmatch(out.String())
	if row == nil || row[1] == "0" || row[2] == "0" {
		t.Fatalf("no embedded row with rates in:\n%s", out.String())
	}
}
