package metrics

import (
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

// handoffs joins the registry's half of a handoff (old lease ended -> new
// grant) to the gateway's (new grant -> first accepted write) where both run
// in this process: the end is kept per (resource, fence) until the fence's
// first write, bounded (the oldest are forgotten).
type handoffs struct {
	ends *lru.Cache[handoffKey, time.Time]
}

type handoffKey struct {
	resource string
	fence    uint64
}

const handoffMemory = 4096

func newHandoffs() *handoffs {
	c, _ := lru.New[handoffKey, time.Time](handoffMemory)
	return &handoffs{ends: c}
}

// Handoff observes the registry's half, stage "grant" (registry.HandoffObserver).
func (m *Metrics) Handoff(resource string, fence uint64, ended, granted time.Time) {
	m.handoff.WithLabelValues("grant").Observe(granted.Sub(ended).Seconds())
	m.handoffs.ends.Add(handoffKey{resource, fence}, ended)
}

// FirstWrite observes the gateway's half, stage "write", and the whole
// handoff, stage "total", when this process saw the old lease end
// (gateway.Observer).
func (m *Metrics) FirstWrite(resource string, fence uint64, issuedAt, at time.Time) {
	m.handoff.WithLabelValues("write").Observe(max(at.Sub(issuedAt), 0).Seconds())
	k := handoffKey{resource, fence}
	if ended, ok := m.handoffs.ends.Peek(k); ok {
		m.handoffs.ends.Remove(k)
		m.handoff.WithLabelValues("total").Observe(max(at.Sub(ended), 0).Seconds())
	}
}
