package history

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// register is the state of one resource: the highest fence admitted, the
// value of every key written so far (sorted "key=value" lines, so that states
// compare with ==), and at most one effect in flight whose outcome the
// client did not learn (PendKey/PendVal): it may still land, until a later
// write of the resource settles whether it did.
type register struct {
	Fence   uint64
	Vals    string
	Pending bool
	PendKey string
	PendVal string
}

func (s register) get(key string) string {
	for _, kv := range strings.Split(s.Vals, "\n") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

func (s register) set(key, val string) register {
	var kvs []string
	for _, kv := range strings.Split(s.Vals, "\n") {
		if k, _, ok := strings.Cut(kv, "="); ok && k != key {
			kvs = append(kvs, kv)
		}
	}
	kvs = append(kvs, key+"="+val)
	sort.Strings(kvs)
	s.Vals = strings.Join(kvs, "\n")
	return s
}

// landed is s after its in-flight effect landed.
func (s register) landed() register {
	s = s.set(s.PendKey, s.PendVal)
	s.Pending, s.PendKey, s.PendVal = false, "", ""
	return s
}

// settled lists s with its in-flight effect landed or lost for good.
func (s register) settled() []register {
	if !s.Pending {
		return []register{s}
	}
	lost := s
	lost.Pending, lost.PendKey, lost.PendVal = false, "", ""
	return []register{s.landed(), lost}
}

// step lists the states a register in s can be in after in answered out.
// This is the specification of a fenced register:
//   - a write that took effect (OK) needs fence >= the highest fence so far;
//     an effect still in flight lands before it or never;
//   - STALE_OWNER is only right when a higher fence had been admitted;
//   - an admitted write whose effect was not applied may move the fence only;
//   - an Unknown write may have done nothing, or moved the fence and left its
//     effect in flight (it lands when a read sees it, or never);
//   - a read returns the value of the latest write that took effect.
func step(s register, in Input, out Output) []register {
	if in.Kind == Read {
		var next []register
		if s.Pending && s.PendKey == in.Key && s.PendVal == out.Value {
			next = append(next, s.landed())
		}
		if s.get(in.Key) == out.Value {
			next = append(next, s)
		}
		return next
	}
	switch out.Outcome {
	case OK:
		if in.Fence < s.Fence {
			return nil
		}
		var next []register
		for _, r := range s.settled() {
			r.Fence = in.Fence
			next = append(next, r.set(in.Key, in.Value))
		}
		return dedupe(next...)
	case Stale:
		if s.Fence > in.Fence {
			return []register{s}
		}
		return nil
	case NotApplied, Unknown:
		next := []register{s}
		if in.Fence < s.Fence {
			return next
		}
		for _, r := range s.settled() {
			r.Fence = in.Fence
			next = append(next, r)
			if out.Outcome == Unknown {
				r.Pending, r.PendKey, r.PendVal = true, in.Key, in.Value
				next = append(next, r)
			}
		}
		return dedupe(next...)
	default: // Refused, Duplicate
		return []register{s}
	}
}

func dedupe(states ...register) []register {
	var out []register
	for _, s := range states {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// Model is the porcupine model of a fenced register per resource; the history
// is partitioned by Input.Resource and each resource is checked on its own.
var Model = porcupine.NondeterministicModel{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		byRes := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range ops {
			res := op.Input.(Input).Resource
			if _, ok := byRes[res]; !ok {
				order = append(order, res)
			}
			byRes[res] = append(byRes[res], op)
		}
		parts := make([][]porcupine.Operation, 0, len(order))
		for _, res := range order {
			parts = append(parts, byRes[res])
		}
		return parts
	},
	Init: func() []any { return []any{register{}} },
	Step: func(state, input, output any) []any {
		next := step(state.(register), input.(Input), output.(Output))
		out := make([]any, len(next))
		for i, s := range next {
			out[i] = s
		}
		return out
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		if in.Kind == Read {
			return fmt.Sprintf("read(%s) -> %q", in.Key, out.Value)
		}
		s := fmt.Sprintf("write(%s, fence %d seg %d, %q) -> %s", in.Key, in.Fence, in.Segment, in.Value, out.Outcome)
		if out.Code != "" {
			s += " " + string(out.Code)
		}
		return s
	},
	DescribeState: func(state any) string {
		s := state.(register)
		d := fmt.Sprintf("fence %d {%s}", s.Fence, strings.ReplaceAll(s.Vals, "\n", ", "))
		if s.Pending {
			d += fmt.Sprintf(" in flight %s=%s", s.PendKey, s.PendVal)
		}
		return d
	},
}
