package storetest

import "github.com/fencegate/fencegate"

// highestFenceIsTheTopAcceptedFence checks fencegate.HighWater: 0 on an empty
// store, the highest accepted fence over all resources afterwards, and a
// refused admission does not raise it.
func highestFenceIsTheTopAcceptedFence(f *fx) {
	hw, ok := f.s.(fencegate.HighWater)
	if !ok {
		f.t.Fatal("the store does not implement fencegate.HighWater")
	}
	top := func() uint64 {
		f.t.Helper()
		v, err := hw.HighestFence(f.ctx)
		if err != nil {
			f.t.Fatalf("highest fence: %v", err)
		}
		return v
	}
	if v := top(); v != 0 {
		f.t.Fatalf("empty store: highest fence %d, want 0", v)
	}
	f.commit(f.admit(f.writer("res/a", 7).req(1, "a")).Receipt.ID, "v1")
	f.commit(f.admit(f.writer("res/b", 3).req(1, "b")).Receipt.ID, "v1")
	if v := top(); v != 7 {
		f.t.Fatalf("highest fence %d, want 7 (res/a)", v)
	}
	f.reject(f.writer("res/b", 2).req(1, "x"), fencegate.CodeStaleOwner, "")
	f.commit(f.admit(f.writer("res/b", 1<<63+5).req(1, "c")).Receipt.ID, "v2")
	if v := top(); v != 1<<63+5 {
		f.t.Fatalf("highest fence %d, want %d", v, uint64(1<<63+5))
	}
}
