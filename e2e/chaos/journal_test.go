package chaos

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/internal/history"
)

// op is one operation as a client saw it: its invocation and its return on
// one logical clock (the journal's), which orders events of all goroutines in
// real time.
type op struct {
	client        int
	kind          history.Kind
	resource, key string
	fence, seg    uint64
	value         string // a write's body, unique per write; a read's result
	replica       int
	lease         string // the lease a write was sent under

	call, ret int64 // logical times; ret == 0 while no answer came
	status    int
	code      string
	receipt   string
	replay    bool
	transport string // the transport error, if any
	sent      bool   // false when the connection was refused: nothing left the client
	out       history.Outcome
}

// journal records operations; safe for concurrent use. It keeps more than a
// history.Recorder (receipt IDs, replicas, transport errors) and leaves out
// reads that failed, which say nothing about the object; history converts it
// for the porcupine check.
type journal struct {
	mu  sync.Mutex
	now int64
	ops []*op
}

// invoke stamps o's invocation and keeps it.
func (j *journal) invoke(o *op) *op {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.now++
	o.call = j.now
	j.ops = append(j.ops, o)
	return o
}

// done stamps o's return (after its answer fields are filled) and classifies it.
func (j *journal) done(o *op) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.now++
	o.ret = j.now
	o.out = classify(o)
}

// snapshot returns the operations recorded so far.
func (j *journal) snapshot() []*op {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]*op(nil), j.ops...)
}

// classify maps a write's answer to what it says about the object, with the
// history package's classification of problem codes.
func classify(o *op) history.Outcome {
	switch {
	case o.kind == history.Read:
		return history.OK
	case o.transport != "" && !o.sent:
		return history.Refused
	case o.transport != "":
		return history.Unknown
	case o.status >= 200 && o.status < 300 && o.replay:
		return history.Duplicate
	case o.status >= 200 && o.status < 300:
		return history.OK
	}
	return history.OutcomeOfCode(fencegate.Code(o.code)).Outcome
}

// notSent reports whether err says the request never reached a server: the
// connection was refused, so the write cannot have happened.
func notSent(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial" && errors.Is(err, syscall.ECONNREFUSED)
}

// settledAs is what became of a write after the settle wait: for a write
// answered Unknown, OK when its receipt is COMMITTED, NotApplied when it was
// admitted but not applied, Refused when it was never admitted.
type settledAs map[*op]history.Outcome

// operations converts the journal for porcupine. STALE_OWNER answers count as
// refusals (see below). Writes whose answer was
// Unknown take what the receipts settled, but keep their return open (after
// every other event): their effect, or their admission, may have happened at
// any time after the call. Reads that failed are left out.
func operations(ops []*op, settled settledAs) []porcupine.Operation {
	var out []porcupine.Operation
	var end int64
	for _, o := range ops {
		end = max(end, o.call, o.ret)
	}
	for _, o := range ops {
		if o.kind == history.Read && (o.transport != "" || o.ret == 0) {
			continue
		}
		in := history.Input{Kind: o.kind, Resource: o.resource, Key: o.key, Fence: o.fence, Segment: o.seg}
		res := history.Output{Outcome: o.out, Code: fencegate.Code(o.code)}
		if o.kind == history.Write {
			in.Value = o.value
		} else {
			res.Value = o.value
		}
		if res.Outcome == history.Stale {
			// The gateway moves the fence when it admits a write, before the
			// effect lands; a STALE_OWNER answer proves a higher fence was
			// admitted, not that its value is visible yet. The register's OK
			// step moves both at once, so it cannot place such a refusal
			// between a concurrent higher write's admission and its effect:
			// here it counts as a refusal that changed nothing, and judge
			// checks on its own that a higher fence had been admitted.
			res.Outcome = history.Refused
		}
		ret := o.ret
		if o.kind == history.Write && (o.out == history.Unknown || ret == 0) {
			end++
			ret = end
			res.Outcome = history.Unknown
			if s, ok := settled[o]; ok {
				res.Outcome = s
			}
		}
		out = append(out, porcupine.Operation{ClientId: o.client, Input: in, Call: o.call, Output: res, Return: ret})
	}
	return out
}

// dump writes the journal as text, one operation per line in call order,
// grouped by resource: what a person reads next to porcupine's visualisation.
func dump(path string, ops []*op, settled settledAs) error {
	var b strings.Builder
	byRes := map[string][]*op{}
	var order []string
	for _, o := range ops {
		if _, ok := byRes[o.resource]; !ok {
			order = append(order, o.resource)
		}
		byRes[o.resource] = append(byRes[o.resource], o)
	}
	sort.Strings(order)
	for _, res := range order {
		fmt.Fprintf(&b, "== %s\n", res)
		for _, o := range byRes[res] {
			what := "read "
			if o.kind == history.Write {
				what = fmt.Sprintf("write f%d s%d", o.fence, o.seg)
			}
			extra := ""
			if s, ok := settled[o]; ok {
				extra = " settled " + s.String()
			}
			if o.transport != "" {
				extra += " transport: " + o.transport
			}
			fmt.Fprintf(&b, "%6d %6d c%d r%d %-14s %-28q %s %d %s %s%s\n", o.call, o.ret, o.client, o.replica, what, o.value,
				o.out, o.status, o.code, o.receipt, extra)
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// shortestFailingPrefix finds (by bisection over invocation times) the
// shortest prefix of ops, taken in call order, that is not linearizable, and
// describes its last operations: the first place where the history went wrong.
func shortestFailingPrefix(ops []*op, settled settledAs) string {
	sorted := append([]*op(nil), ops...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].call < sorted[j].call })
	fails := func(n int) bool {
		r, err := history.Check(operations(sorted[:n], settled), time.Minute, "")
		return err == nil && !r.Linearizable && !r.TimedOut
	}
	if !fails(len(sorted)) {
		return "  (the whole history is linearizable)\n"
	}
	lo, hi := 0, len(sorted) // fails(hi) holds; find the least such n
	for lo+1 < hi {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	var b strings.Builder
	for _, o := range sorted[max(0, hi-12):hi] {
		fmt.Fprintf(&b, "  call %d ret %d client %d replica %d kind %d fence %d seg %d value %q -> %s %d %s %s\n",
			o.call, o.ret, o.client, o.replica, o.kind, o.fence, o.seg, o.value, o.out, o.status, o.code, o.receipt)
	}
	return b.String()
}
