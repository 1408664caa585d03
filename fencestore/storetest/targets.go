package storetest

import "github.com/fencegate/fencegate"

// targetIsFencedUnderOneResource: nested resources are separate fence lines,
// so a target belongs to the resource that first admitted it; a grant of
// another resource covering the same target is RESOURCE_MISMATCH, and a
// refused admission binds nothing.
func targetIsFencedUnderOneResource(f *fx) {
	outer := f.writer("res/n", 5)
	outer.target = "res/n/k"
	f.commit(f.admit(outer.req(1, "a")).Receipt.ID, "v1")

	inner := f.writer("res/n/k", 9) // a nested resource, a higher fence of its own line
	f.reject(inner.req(1, "b"), fencegate.CodeResourceMismatch, "")

	// The outer line goes on as before.
	f.admit(outer.req(2, "c"))

	// A refused admission (a new fence must start at segment 1) does not bind.
	first := f.writer("res/m", 3)
	first.target = "res/m/x"
	f.reject(first.req(2, "d"), fencegate.CodeSegmentOutOfOrder, "")
	other := f.writer("res/m/x", 4)
	f.admit(other.req(1, "e"))
	f.reject(first.req(1, "f"), fencegate.CodeResourceMismatch, "")
}

// quarantineBindsNoTarget: a segment replayed with another target is
// quarantined, and that target stays free for the resource that owns it.
func quarantineBindsNoTarget(f *fx) {
	outer := f.writer("res/q", 5)
	outer.target = "res/q/a"
	a := f.admit(outer.req(1, "a"))
	other := *outer
	other.target = "res/q/b"
	f.quarantine(other.req(1, "a"), a.Receipt.ID)
	inner := f.writer("res/q/b", 7)
	f.admit(inner.req(1, "x"))
}
