package authority_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fencegate/fencegate/authority"
)

// The bundle file may be shared by a registry and replicas, each replacing
// it with WriteFileAtomic: a writer must never install what another writer
// is still writing, so no reader ever sees a torn or mixed file.
func TestWriteFileAtomicIsNotTornByAnotherWriter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bundle.json")
	// Another process mid-write, with its temporary file open.
	other, err := os.OpenFile(path+".tmp", os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	want := []byte(`{"version":2,"keys":[]}`)
	if err := authority.WriteFileAtomic(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Write([]byte(`{"version":1,"keys":[{"kid":"x"}]} and more`)); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("the file holds %q, not the %q written", got, want)
	}
}
