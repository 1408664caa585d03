package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// proc is one server process a test owns: started from argv with its output
// in logPath, killed with SIGKILL (never a shared server).
type proc struct {
	argv    []string
	env     []string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
}

// start runs the process; the caller waits for readiness.
func (p *proc) start() error {
	if p.cmd != nil {
		return fmt.Errorf("%s is already running", p.argv[0])
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so kill also reaches the children a server forks
	// (Redis writes its first AOF from a forked child; one left running would
	// still be writing into the test's directory while it is removed).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return err
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	go func(done chan struct{}) { _ = cmd.Wait(); _ = logf.Close(); close(done) }(p.exited)
	return nil
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL (what a crash or an OOM kill does) and waits for the exit.
func (p *proc) kill() {
	if p.cmd == nil {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.exited
	// The group's other members are reparented and reaped by init; wait until
	// none is left (bounded: a kernel that is slow to reap is not our failure).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err := syscall.Kill(-pgid, 0); err == syscall.ESRCH {
			break
		}
	}
	p.cmd = nil
}

// log is the process output so far, for failure messages.
func (p *proc) log() string {
	b, _ := os.ReadFile(p.logPath)
	return string(b)
}

// waitFor polls ready until it returns nil, the process exits, or a minute passes.
func (p *proc) waitFor(ready func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if !p.running() {
			return fmt.Errorf("%s exited: %v\n%s", filepath.Base(p.argv[0]), err, p.log())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after a minute: %v\n%s", filepath.Base(p.argv[0]), err, p.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Tool finds the program name on PATH for a test that needs it. Where it is
// missing, the test fails under CI (any non-empty CI: scripts/test.sh
// installs every tool the suites use) and is skipped elsewhere, with install
// saying how to get it: a suite that needs a tool never skips in CI.
func Tool(t interface {
	Helper()
	Fatalf(string, ...any)
	Skipf(string, ...any)
}, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s not found on PATH: the suite must run in CI (%s)", name, install)
		}
		t.Skipf("%s not found on PATH (%s)", name, install)
	}
	return path
}

// copyFile copies src to dst (mode 0644), replacing dst.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
