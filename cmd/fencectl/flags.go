package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/fencegate/fencegate"
)

// Flags whose values are checked when they are parsed: a value out of range
// is a usage mistake (exit 2) reported before anything is sent, never a
// refusal from a check the client library makes locally (exit 1), nor a
// value silently replaced by a default.

// boundedDuration is a duration flag that refuses values below min.
type boundedDuration struct {
	d   *time.Duration
	min time.Duration
}

// durationVar registers a duration flag with default value that refuses,
// as a usage mistake, a value below min.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value, min time.Duration, usage string) {
	*p = value
	fs.Var(&boundedDuration{d: p, min: min}, name, usage)
}

// String is the flag's value (the flag package's default shown in help).
func (b *boundedDuration) String() string {
	if b == nil || b.d == nil {
		return time.Duration(0).String()
	}
	return b.d.String()
}

// Set parses s and refuses a duration below the flag's minimum.
func (b *boundedDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration (e.g. 30s, 1m30s, 500ms)")
	}
	if d < b.min {
		if b.min == 0 {
			return errors.New("must not be negative")
		}
		return fmt.Errorf("must be at least %s", b.min)
	}
	*b.d = d
	return nil
}

// minTTL is the smallest --ttl fencectl sends: the wire carries a lease's
// time to live in whole milliseconds (ttlMs), so anything shorter would be
// sent as 0. The registry may ask for more (its MinTTL): it refuses a
// shorter one with INVALID_REQUEST.
const minTTL = time.Millisecond

// pageLimit is a listing's --limit: 1 to fencegate.MaxPageLimit items (the
// gateway refuses other values), 0 while not given (the gateway's default).
type pageLimit struct{ n *int }

// String is the flag's value.
func (p pageLimit) String() string {
	if p.n == nil || *p.n == 0 {
		return ""
	}
	return strconv.Itoa(*p.n)
}

// Set parses s and refuses a limit outside 1 to fencegate.MaxPageLimit.
func (p pageLimit) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > fencegate.MaxPageLimit {
		return fmt.Errorf("must be a whole number from 1 to %d", fencegate.MaxPageLimit)
	}
	*p.n = n
	return nil
}
