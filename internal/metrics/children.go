package metrics

import (
	"maps"
	"sync"
	"sync/atomic"
)

// children remembers a vector's children by their label values, so that the
// observations every write makes (request, admission, effect, settle,
// receipt, refusal) find their series with one map read instead of
// validating and hashing the label values and taking the vector's lock each
// time. Every label is bounded (the package's guarantee), so the map is too.
// Reads take no lock: the map is replaced, copied, when a new label set
// first appears.
type children[K comparable, V any] struct {
	mu    sync.Mutex // serialises additions
	m     atomic.Pointer[map[K]V]
	child func(K) V // the vector's WithLabelValues for K
}

func newChildren[K comparable, V any](child func(K) V) *children[K, V] {
	return &children[K, V]{child: child}
}

// get is the child for k, created by the vector on first use.
func (c *children[K, V]) get(k K) V {
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var next map[K]V
	if m := c.m.Load(); m != nil {
		if v, ok := (*m)[k]; ok {
			return v
		}
		next = maps.Clone(*m)
	} else {
		next = map[K]V{}
	}
	v := c.child(k)
	next[k] = v
	c.m.Store(&next)
	return v
}

// by1, by2 and by3 bind a vector of one, two or three labels, given its
// WithLabelValues.
func by1[V any](with func(...string) V) *children[string, V] {
	return newChildren(func(k string) V { return with(k) })
}

func by2[V any](with func(...string) V) *children[[2]string, V] {
	return newChildren(func(k [2]string) V { return with(k[0], k[1]) })
}

func by3[V any](with func(...string) V) *children[[3]string, V] {
	return newChildren(func(k [3]string) V { return with(k[0], k[1], k[2]) })
}
