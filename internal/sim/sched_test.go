package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"
)

// simClock is the one clock of a run: registry, gateways, verifiers, stores
// and reconcilers all read it; only the scheduler moves it.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *simClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

// task is one simulated thread of control.
type task struct {
	name string
	wake chan struct{}
	at   time.Time // runnable from
	done bool
}

type taskKey struct{}

func taskOf(ctx context.Context) *task {
	t, _ := ctx.Value(taskKey{}).(*task)
	return t
}

// sched runs tasks one at a time; see the package doc.
type sched struct {
	clock  *simClock
	rng    *rand.Rand
	tasks  []*task
	events chan struct{}
	cur    *task // the running task
	steps  int
	// stuck bounds the real time one task may run between two interception
	// points before the run is declared deadlocked.
	stuck time.Duration
}

func newSched(clock *simClock, rng *rand.Rand) *sched {
	return &sched{clock: clock, rng: rng, events: make(chan struct{}), stuck: 2 * time.Minute}
}

// spawn adds a task that runs fn when first scheduled. It may be called by a
// running task.
func (s *sched) spawn(ctx context.Context, name string, fn func(ctx context.Context)) {
	t := &task{name: name, wake: make(chan struct{}), at: s.clock.Now()}
	s.tasks = append(s.tasks, t)
	ctx = context.WithValue(ctx, taskKey{}, t)
	go func() {
		<-t.wake
		defer func() {
			t.done = true
			s.events <- struct{}{}
		}()
		fn(ctx)
	}()
}

// sleep parks the running task until the clock has moved d (0: just yield).
// Only one task runs at a time, so the running task is the caller.
func (s *sched) sleep(_ context.Context, d time.Duration) {
	t := s.cur
	t.at = s.clock.Now().Add(d)
	s.events <- struct{}{}
	<-t.wake
}

// run schedules until every task has finished.
func (s *sched) run() error {
	for {
		live := s.tasks[:0]
		for _, t := range s.tasks {
			if !t.done {
				live = append(live, t)
			}
		}
		s.tasks = live
		if len(live) == 0 {
			return nil
		}
		now := s.clock.Now()
		var runnable []*task
		next := live[0].at
		for _, t := range live {
			if !t.at.After(now) {
				runnable = append(runnable, t)
			}
			if t.at.Before(next) {
				next = t.at
			}
		}
		if len(runnable) == 0 {
			s.clock.set(next)
			continue
		}
		t := runnable[s.rng.IntN(len(runnable))]
		// Each step costs the system a little time: 0 to 3 ms.
		s.clock.set(now.Add(time.Duration(s.rng.IntN(3000)) * time.Microsecond))
		s.steps++
		s.cur = t
		t.wake <- struct{}{}
		select {
		case <-s.events:
		case <-time.After(s.stuck):
			return fmt.Errorf("sim: task %s ran %v without reaching an interception point (blocked outside the scheduler?); live: %s",
				t.name, s.stuck, names(live))
		}
	}
}

func names(ts []*task) string {
	var n []string
	for _, t := range ts {
		n = append(n, t.name)
	}
	sort.Strings(n)
	return strings.Join(n, ",")
}
