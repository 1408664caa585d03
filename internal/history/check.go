package history

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Result is the verdict of Check.
type Result struct {
	// Linearizable is true when every resource's history is.
	Linearizable bool
	// TimedOut is true when the checker gave up before a verdict.
	TimedOut bool
	// Operations is the number of operations checked.
	Operations int
	// Visualization is the HTML file written for a history that is not
	// linearizable (or timed out), "" otherwise.
	Visualization string
}

// Check checks ops (from Recorder.Operations) against Model within timeout
// (0: no limit). For a history that is not linearizable, or when the checker
// times out, it writes porcupine's HTML visualisation to htmlPath (when not
// "") and names it in the result.
func Check(ops []porcupine.Operation, timeout time.Duration, htmlPath string) (Result, error) {
	model := Model.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	out := Result{Linearizable: res == porcupine.Ok, TimedOut: res == porcupine.Unknown, Operations: len(ops)}
	if res == porcupine.Ok || htmlPath == "" {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Dir(htmlPath), 0o755); err != nil {
		return out, err
	}
	if err := porcupine.VisualizePath(model, info, htmlPath); err != nil {
		return out, fmt.Errorf("write visualisation: %w", err)
	}
	out.Visualization = htmlPath
	return out, nil
}

// ArtifactDir is where tests leave artifacts such as visualisations:
// $FENCEGATE_TEST_ARTIFACTS, else fencegate-artifacts in the OS temp dir.
func ArtifactDir() string {
	if d := os.Getenv("FENCEGATE_TEST_ARTIFACTS"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "fencegate-artifacts")
}

// CheckT checks the recorder's history in a test: a history that is not
// linearizable fails t and names the visualisation written to
// ArtifactDir()/<test name>-<name>.html. A checker timeout fails t too: a
// history too big to check is a test too big to trust.
func CheckT(t testing.TB, r *Recorder, name string, timeout time.Duration) Result {
	t.Helper()
	file := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name() + "-" + name + ".html")
	res, err := Check(r.Operations(), timeout, filepath.Join(ArtifactDir(), file))
	switch {
	case err != nil:
		t.Errorf("history %s: %v", name, err)
	case res.TimedOut:
		t.Errorf("history %s (%d operations): the linearizability check timed out after %v; visualisation: %s",
			name, res.Operations, timeout, res.Visualization)
	case !res.Linearizable:
		t.Errorf("history %s (%d operations) is not linearizable for a fenced register; visualisation: %s",
			name, res.Operations, res.Visualization)
	}
	return res
}
