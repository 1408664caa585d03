package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The /proc readings loadbench takes of the gateway and of a local Postgres
// server: CPU time (stat ticks, schedstat ns) and process tree.

// childOf is the first child of pid (the traced gateway under strace), or
// pid itself when it has none.
func childOf(pid int) int {
	if c := childrenOf(pid); len(c) > 0 {
		return c[0]
	}
	return pid
}

// isPostgres reports whether pid is a Postgres process (its comm).
func isPostgres(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.HasPrefix(string(comm), "postgres")
}

// statFields are the fields of /proc/PID/stat after the command name
// (field 3, the state, is [0]).
func statFields(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
}

// parentOf is pid's parent (0 if unknown).
func parentOf(pid int) int {
	if f := statFields(pid); len(f) > 1 {
		ppid, _ := strconv.Atoi(f[1])
		return ppid
	}
	return 0
}

// statTimes is a process's own user+system time and that of its reaped
// children (utime+stime, cutime+cstime).
func statTimes(pid int) (own, children time.Duration) {
	f := statFields(pid)
	if len(f) < 15 {
		return 0, 0
	}
	tick := func(s string) time.Duration {
		n, _ := strconv.ParseInt(s, 10, 64)
		return time.Duration(n) * time.Second / 100 // USER_HZ is 100 on Linux
	}
	return tick(f[11]) + tick(f[12]), tick(f[13]) + tick(f[14])
}

// schedTime is the time a process has run on a CPU (/proc/PID/schedstat,
// ns; user and system), falling back to /proc/PID/stat's ticks.
func schedTime(pid int) time.Duration {
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid)); err == nil {
		if f := strings.Fields(string(data)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return time.Duration(ns)
			}
		}
	}
	own, _ := statTimes(pid)
	return own
}

// childrenOf are pid's live children, over all its threads.
func childrenOf(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		data, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
