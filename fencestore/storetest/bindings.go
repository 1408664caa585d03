package storetest

import "github.com/fencegate/fencegate"

// bindingCanBeInspectedAndClearedWhenIdle: every store is a
// fencegate.TargetBindings. Binding names the resource that first admitted a
// target; Unbind refuses, changing nothing, a target bound to another
// resource (RESOURCE_MISMATCH), an unbound one (NOT_FOUND) and one whose
// resource has an effect in flight (RESOURCE_BUSY); otherwise it removes only
// the binding (fence state, receipts and version stay), and the next accepted
// admission of another resource binds the target to it.
func bindingCanBeInspectedAndClearedWhenIdle(f *fx) {
	b, ok := f.s.(fencegate.TargetBindings)
	if !ok {
		f.t.Fatalf("%T does not implement fencegate.TargetBindings", f.s)
	}
	_, err := b.Binding(f.ctx, "res/p/k")
	wantCode(f.t, err, fencegate.CodeNotFound, "")

	parent := f.writer("res/p", 5)
	parent.target = "res/p/k"
	first := f.admit(parent.req(1, "a"))
	if got, err := b.Binding(f.ctx, "res/p/k"); err != nil || got != "res/p" {
		f.t.Fatalf("binding = %q, %v; want res/p", got, err)
	}
	refuse := func(target, resource string, code fencegate.Code) {
		f.t.Helper()
		before := f.snapshot(true)
		wantCode(f.t, b.Unbind(f.ctx, target, resource), code, "")
		f.sameJSON("store after refused unbind ("+string(code)+")", f.snapshot(true), before)
		if got, err := b.Binding(f.ctx, "res/p/k"); err != nil || got != "res/p" {
			f.t.Fatalf("binding after refused unbind = %q, %v", got, err)
		}
	}
	refuse("res/p/k", "res/p", fencegate.CodeResourceBusy) // segment 1 is still PENDING
	f.commit(first.Receipt.ID, "v1")
	refuse("res/p/k", "res/p/k", fencegate.CodeResourceMismatch)
	refuse("res/p/other", "res/p", fencegate.CodeNotFound)

	before := f.snapshot(true)
	if err := b.Unbind(f.ctx, "res/p/k", "res/p"); err != nil {
		f.t.Fatalf("unbind: %v", err)
	}
	f.sameJSON("store after unbind (only the binding goes)", f.snapshot(true), before)
	_, err = b.Binding(f.ctx, "res/p/k")
	wantCode(f.t, err, fencegate.CodeNotFound, "")

	// The key's own resource now writes it, chained on the version kept.
	own := f.writer("res/p/k", 9)
	adm := f.admit(own.req(1, "b"))
	if adm.PreviousVersion != "v1" {
		f.t.Fatalf("previous version after unbind = %q, want v1", adm.PreviousVersion)
	}
	if got, err := b.Binding(f.ctx, "res/p/k"); err != nil || got != "res/p/k" {
		f.t.Fatalf("binding after the owner's write = %q, %v", got, err)
	}
	f.reject(parent.req(2, "c"), fencegate.CodeResourceMismatch, "")
}
