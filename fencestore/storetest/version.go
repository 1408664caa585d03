package storetest

import (
	"github.com/fencegate/fencegate"
)

// versionSwapIsCompareAndSet: SwapVersion moves a target's version only from
// the version it has, and a refused swap leaves it as it was.
func versionSwapIsCompareAndSet(f *fx) {
	ctx := f.ctx
	swap := func(from, to string, want fencegate.Code) {
		f.t.Helper()
		if got := fencegate.ErrorCode(f.s.SwapVersion(ctx, "obj/x", from, to)); got != want {
			f.t.Fatalf("SwapVersion(%q -> %q) = %q, want %q", from, to, got, want)
		}
	}
	swap("", "v1", "")
	swap("", "v9", fencegate.CodeBackendConflict)
	swap("v0", "v9", fencegate.CodeBackendConflict)
	if v := f.version("obj/x"); v != "v1" {
		f.t.Fatalf("version after refused swaps = %q", v)
	}
	swap("v1", "v2", "")
	swap("v1", "", fencegate.CodeBackendConflict)
	swap("v2", "", "")
	if v := f.version("obj/x"); v != "" {
		f.t.Fatalf("version after forgetting = %q", v)
	}
	swap("", "", "")
	// A committed receipt's version is what the next swap must start from.
	w := f.writer("obj/y", 3)
	a := f.admit(w.req(1, "a"))
	f.commit(a.Receipt.ID, "r1")
	if got := fencegate.ErrorCode(f.s.SwapVersion(ctx, w.target, "r1", "s1")); got != "" {
		f.t.Fatalf("swap from the committed version: %s", got)
	}
	if b := f.admit(w.req(2, "b")); b.PreviousVersion != "s1" {
		f.t.Fatalf("PreviousVersion after swap = %q", b.PreviousVersion)
	}
}
