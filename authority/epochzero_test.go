package authority

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencegate/fencegate"
)

// Rule: a trust bundle holding a key at epoch 0 (never issued, and no epoch
// revocation can drop it) is refused: an upload is INVALID_REQUEST and
// changes neither the bundle in force nor its files, and a start on such a
// bundle file is refused.
func TestABundleWithAKeyAtEpochZeroIsRefusedAtUploadAndAtStart(t *testing.T) {
	ctx := context.Background()
	a, cfg := openSigning(t)
	doc, err := a.TrustBundle(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	version := a.Verifier().Bundle().Version()
	m["version"] = version + 1
	m["keys"].([]any)[0].(map[string]any)["epoch"] = 0
	zero, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	was := readFiles(cfg.Files.State, cfg.Files.Bundle)
	if _, err := a.SetTrustBundle(ctx, zero); fencegate.ErrorCode(err) != fencegate.CodeInvalidRequest || !strings.Contains(err.Error(), "epoch 0") {
		t.Fatalf("an upload with a key at epoch 0: %v, want INVALID_REQUEST naming epoch 0", err)
	}
	if v := a.Verifier().Bundle().Version(); v != version {
		t.Fatalf("the bundle in force moved to version %d", v)
	}
	sameFiles(t, "after the refused upload", was)

	dir := t.TempDir()
	start := Config{Files: Files{State: filepath.Join(dir, "state.json"), Bundle: filepath.Join(dir, "bundle.json")},
		Now: cfg.Now, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := os.WriteFile(start.Files.Bundle, zero, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(start); err == nil || !strings.Contains(err.Error(), "epoch 0") {
		t.Fatalf("a start on a bundle file with a key at epoch 0: %v, want refused naming epoch 0", err)
	}
}
