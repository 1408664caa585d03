package authority_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/gateway"
)

// stateElsewhere keeps the state file in a directory of its own, so a test
// can take that directory away (every save then fails) and put it back.
func stateElsewhere(e *env) (lose, restore func()) {
	return elsewhere(e, &e.cfg.Files.State, "state")
}

// elsewhere moves the file *path names into a directory of its own (name),
// so a test can take that directory away (every write there then fails, as
// on a read-only mount) and put it back.
func elsewhere(e *env, path *string, name string) (lose, restore func()) {
	e.t.Helper()
	dir := filepath.Join(e.dir, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		e.t.Fatal(err)
	}
	*path = filepath.Join(dir, filepath.Base(*path))
	move := func(from, to string) func() {
		return func() {
			e.t.Helper()
			if err := os.Rename(from, to); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	return move(dir, dir+".away"), move(dir+".away", dir)
}

// A policy bump whose save fails is not in force: memory never runs ahead of
// the state file, so a restart cannot take the generation back down.
func TestPolicyBumpThatIsNotPersistedChangesNothing(t *testing.T) {
	e := newEnv(t, true)
	lose, restore := stateElsewhere(e)
	a := e.open()
	before, err := os.ReadFile(e.cfg.Files.State)
	if err != nil {
		t.Fatal(err)
	}
	lose()
	_, err = a.BumpPolicy(ctx)
	wantCode(t, err, fencegate.CodeInternal)
	restore()
	if g := a.PolicyGeneration(); g != 1 {
		t.Fatalf("a bump that was not persisted is in force: generation %d", g)
	}
	if after, _ := os.ReadFile(e.cfg.Files.State); !bytes.Equal(before, after) {
		t.Fatalf("state file changed:\n%s\n%s", before, after)
	}
	if g := e.open().PolicyGeneration(); g != 1 {
		t.Fatalf("after restart: generation %d", g)
	}
	if st, err := a.BumpPolicy(ctx); err != nil || st.PolicyGeneration != 2 || e.open().PolicyGeneration() != 2 {
		t.Fatalf("bump once the state file is writable again: %+v %v", st, err)
	}
}

// A mode change whose save fails is not in force and not counted as a
// break-glass use.
func TestModeChangeThatIsNotPersistedChangesNothing(t *testing.T) {
	e := newEnv(t, true)
	lose, restore := stateElsewhere(e)
	a := e.open()
	before, err := os.ReadFile(e.cfg.Files.State)
	if err != nil {
		t.Fatal(err)
	}
	lose()
	_, err = a.SetMode(ctx, rule("roll/*", gateway.Shadow), true)
	wantCode(t, err, fencegate.CodeInternal)
	restore()
	if m := a.Modes().For("roll/x"); m != gateway.Enforce || len(a.Modes().Rules()) != 0 || len(e.alarm.uses) != 0 {
		t.Fatalf("a mode change that was not persisted is in force: %s %v, break-glass uses %v", m, a.Modes().Rules(), e.alarm.uses)
	}
	if after, _ := os.ReadFile(e.cfg.Files.State); !bytes.Equal(before, after) {
		t.Fatalf("state file changed:\n%s\n%s", before, after)
	}
	// A later, persisted change must not carry the lost one along.
	if _, err := a.SetMode(ctx, rule("other/*", gateway.Enforce), false); err != nil {
		t.Fatal(err)
	}
	b := e.open()
	if b.Modes().For("roll/x") != gateway.Enforce || b.Modes().For("other/x") != gateway.Enforce || len(b.Modes().Rules()) != 1 {
		t.Fatalf("after restart: %v", b.Modes().Rules())
	}
}
