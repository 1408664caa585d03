package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

func init() {
	register("run", verb{usage: "run --resource R [--ttl 30s] [--operation ID] [--s3-endpoint URL] [--region R] [--grace 10s] -- COMMAND [ARGS...]",
		rest: true, flags: runFlags,
		help: "hold a lease while COMMAND runs with its S3 credentials in the environment; stop COMMAND if ownership is lost or unknown; release at exit; exit with COMMAND's status"})
}

// runOpts are the flags of fencectl run.
type runOpts struct {
	resource, operation, requestID, endpoint, region string
	ttl, grace                                       time.Duration
}

func runFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	var o runOpts
	fs.StringVar(&o.resource, "resource", "", "the resource to lease, e.g. s3a/reports/2026-07 (required)")
	durationVar(fs, &o.ttl, "ttl", 30*time.Second, minTTL, "lease time to live, a `duration` of at least 1ms; renewed at a third of it while COMMAND runs")
	fs.StringVar(&o.operation, "operation", "", "stable business operation ID (default: the resource)")
	fs.StringVar(&o.requestID, "request-id", "", "idempotency key of the acquisition (default: generated)")
	fs.StringVar(&o.endpoint, "s3-endpoint", "", "the gateway's S3 endpoint exported as AWS_ENDPOINT_URL (env FENCEGATE_S3_URL; default: the gateway URL)")
	fs.StringVar(&o.region, "region", "", "region exported as AWS_REGION (env AWS_REGION; default us-east-1)")
	durationVar(fs, &o.grace, "grace", 10*time.Second, 0, "after SIGTERM, how long (a `duration`, 0 for none) COMMAND has to exit before SIGKILL")
	return func(ctx context.Context, c *cmd) error {
		if o.resource == "" {
			return usageError{"--resource is required"}
		}
		if len(c.rest) == 0 {
			return usageError{"give the command to run after --"}
		}
		if o.operation == "" {
			o.operation = o.resource
		}
		if o.endpoint == "" {
			o.endpoint = env("FENCEGATE_S3_URL")
		}
		if o.endpoint == "" {
			o.endpoint = c.g.gateway
		}
		if o.region == "" {
			o.region = env("AWS_REGION")
		}
		if o.region == "" {
			o.region = "us-east-1"
		}
		s3URL, err := s3Endpoint(o.endpoint)
		if err != nil {
			return err // before acquiring: nothing is sent for a mistaken endpoint
		}
		l, err := c.client.AcquireLease(ctx, client.LeaseParams{AcquireParams: client.AcquireParams{
			Resource: o.resource, RequestID: o.requestID, TTL: o.ttl, OperationID: o.operation, S3Credentials: true}})
		if err != nil {
			if l != nil && client.IsUncertain(err) {
				return &client.UncertainError{Op: "acquire (nothing was run; repeat with --request-id " + l.RequestID() + ")", Err: err}
			}
			return err
		}
		creds, ok := l.S3Credentials()
		if !ok {
			_ = l.Release(context.WithoutCancel(ctx))
			return fencegate.Errorf(fencegate.CodeUnsupported, "the registry answered no S3 credentials for lease %s", l.ID())
		}
		info := l.Info()
		fmt.Fprintf(c.errOut, "fencectl run: lease %s (fence %d) on %s; S3 endpoint %s, access key %s\n",
			info.Lease, info.FenceToken, info.Resource, o.endpoint, creds.AccessKeyID)
		environ := childEnv(os.Environ(), info, creds, o)
		cfg, err := writeS3cmdConfig(creds, s3URL, o.region)
		if err != nil {
			_ = l.Release(context.WithoutCancel(ctx))
			return err
		}
		defer os.Remove(cfg)
		return supervise(ctx, c, l, append(environ, "S3CMD_CONFIG="+cfg), o)
	}
}

// childEnv is the environment of COMMAND: the caller's, with the lease's S3
// credentials, the gateway's S3 endpoint and the region. A session token the
// caller had is removed (it would be sent with the lease's keys). AWS CLI v2
// reads AWS_ENDPOINT_URL from 2.13 on and the SDKs from their 2023 releases
// ("Service-specific endpoints", AWS SDKs and Tools Reference Guide); older
// clients need --endpoint-url "$AWS_ENDPOINT_URL" (Debian's awscli 2.9 among
// them). rclone takes RCLONE_S3_* for any s3 remote (rclone docs, "Environment
// variables"); s3cmd reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY but
// needs --host.
func childEnv(base []string, info client.LeaseInfo, creds fencegate.S3AccessKeys, o runOpts) []string {
	set := map[string]string{
		"AWS_ACCESS_KEY_ID":           creds.AccessKeyID,
		"AWS_SECRET_ACCESS_KEY":       creds.SecretAccessKey,
		"AWS_ENDPOINT_URL":            o.endpoint,
		"AWS_ENDPOINT_URL_S3":         o.endpoint,
		"AWS_REGION":                  o.region,
		"AWS_DEFAULT_REGION":          o.region,
		"RCLONE_S3_PROVIDER":          "Other",
		"RCLONE_S3_ENV_AUTH":          "true",
		"RCLONE_S3_ENDPOINT":          o.endpoint,
		"RCLONE_S3_REGION":            o.region,
		"RCLONE_S3_FORCE_PATH_STYLE":  "true",
		"RCLONE_S3_NO_CHECK_BUCKET":   "true", // buckets are the gateway's stores: never created
		"FENCEGATE_LEASE":             info.Lease,
		"FENCEGATE_RESOURCE":          info.Resource,
		"FENCEGATE_FENCE_TOKEN":       strconv.FormatUint(info.FenceToken, 10),
		"FENCEGATE_S3_URL":            o.endpoint,
		"FENCEGATE_OPERATION_ID":      info.OperationID,
		"S3CMD_CONFIG":                "", // set by the caller to the lease's file
		"AWS_SESSION_TOKEN":           "",
		"AWS_SECURITY_TOKEN":          "",
		"RCLONE_S3_SESSION_TOKEN":     "",
		"RCLONE_S3_ACCESS_KEY_ID":     "",
		"RCLONE_S3_SECRET_ACCESS_KEY": "",
	}
	out := make([]string, 0, len(base)+len(set))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, ours := set[k]; !ours {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		if v != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// writeS3cmdConfig writes an s3cmd configuration for the lease (s3cmd reads
// no endpoint from the environment, but takes its configuration file from
// S3CMD_CONFIG) at endpoint u (s3Endpoint's) in region: mode 0600 in the
// temporary directory, removed at exit.
func writeS3cmdConfig(creds fencegate.S3AccessKeys, u *url.URL, region string) (string, error) {
	f, err := os.CreateTemp("", "fencectl-s3cmd-*.cfg") // created 0600
	if err != nil {
		return "", err
	}
	_, err = fmt.Fprintf(f, "[default]\naccess_key = %s\nsecret_key = %s\nhost_base = %s\nhost_bucket = %s\nuse_https = %s\nbucket_location = %s\nsignature_v2 = False\n",
		creds.AccessKeyID, creds.SecretAccessKey, u.Host, u.Host, strconv.FormatBool(u.Scheme == "https"), region)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// s3Endpoint parses the S3 endpoint run exports (--s3-endpoint, else
// FENCEGATE_S3_URL, else the gateway URL): an http(s) URL with a host, or a
// usage mistake.
func s3Endpoint(endpoint string) (*url.URL, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, usageError{fmt.Sprintf("--s3-endpoint %q is not an http(s) URL", endpoint)}
	}
	return u, nil
}

// stdinIsTerminal tells whether fencectl's stdin is a terminal; tests
// replace it.
var stdinIsTerminal = func() bool {
	f, ok := stdin.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// supervise runs COMMAND under lease l: renewing it, stopping COMMAND and
// its process group (SIGTERM, then SIGKILL after o.grace) once ownership is
// lost or unknown, forwarding SIGTERM and SIGHUP (and SIGINT, unless a
// terminal sends it to COMMAND too), and releasing the lease when COMMAND
// has exited. The exit status is COMMAND's (128+n for a signal); if COMMAND
// was stopped for the lease and still exited 0, it is 1.
func supervise(ctx context.Context, c *cmd, l *client.Lease, environ []string, o runOpts) error {
	child := exec.Command(c.rest[0], c.rest[1:]...)
	child.Env, child.Stdin, child.Stdout, child.Stderr = environ, stdin, c.out, c.errOut
	child.WaitDelay = o.grace
	// COMMAND gets a process group of its own, so that stopping it for the
	// lease stops what it started too (a shell's children would otherwise
	// keep writing with the lease's credentials), unless fencectl's stdin
	// is a terminal: an interactive command stays in the terminal's
	// foreground group, and there only COMMAND itself is signalled.
	group := !stdinIsTerminal()
	if group {
		child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	signalChild := func(s os.Signal) {
		if sig, ok := s.(syscall.Signal); ok && group {
			_ = syscall.Kill(-child.Process.Pid, sig)
			return
		}
		_ = child.Process.Signal(s)
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	if err := child.Start(); err != nil {
		_ = l.Release(context.WithoutCancel(ctx))
		return localError{fmt.Sprintf("start %s: %v (lease %s released)", c.rest[0], err, l.ID()), err}
	}
	done := make(chan error, 1)
	go func() { done <- child.Wait() }()
	rctx, stopRenewing := context.WithCancel(ctx)
	renewed := make(chan struct{})
	go func() { defer close(renewed); renew(rctx, l, o.ttl) }()

	check := time.NewTicker(checkEvery(o.ttl))
	defer check.Stop()
	var lost error
	var kill <-chan time.Time
	var werr error
wait:
	for {
		select {
		case werr = <-done:
			break wait
		case s := <-sigs:
			// SIGINT from a terminal reaches COMMAND by itself when it
			// shares fencectl's process group; fencectl only stays to
			// release the lease. In a group of its own it is forwarded.
			if s != syscall.SIGINT || group {
				signalChild(s)
			}
		case <-check.C:
			if lost == nil {
				if lost = ownership(l); lost != nil {
					fmt.Fprintf(c.errOut, "fencectl run: %v: stopping %s (SIGTERM, SIGKILL after %s)\n", lost, c.rest[0], o.grace)
					signalChild(syscall.SIGTERM)
					kill = time.After(o.grace)
				}
			}
		case <-kill:
			signalChild(syscall.SIGKILL)
		}
	}
	if lost != nil && group {
		// COMMAND has exited; what it started and that outlived it (a
		// child trapping SIGTERM) must not go on past the lease either.
		_ = syscall.Kill(-child.Process.Pid, syscall.SIGKILL)
	}
	stopRenewing()
	<-renewed
	rel, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	relErr := l.Release(rel)
	code := statusOf(child.ProcessState, werr)
	if relErr != nil {
		fmt.Fprintf(c.errOut, "fencectl run: release of lease %s failed (it will expire by its TTL): %v\n", l.ID(), relErr)
	}
	if lost != nil {
		return exitStatus{code: max(code, 1), err: lost}
	}
	if code != 0 {
		return exitStatus{code: code}
	}
	return nil
}

// ownership is nil while l is HELD (or renewing) before its local deadline,
// else why ownership is lost or unknown.
func ownership(l *client.Lease) error {
	st := l.State()
	switch {
	case st != client.StateHeld && st != client.StateRenewing:
		var cause string
		if err := l.Err(); err != nil {
			cause = ": " + err.Error()
		}
		return fencegate.Errorf(fencegate.CodeLeaseNotHeld, "lease %s is %s%s", l.ID(), st, cause)
	case !time.Now().Before(l.Deadline()):
		return fencegate.Errorf(fencegate.CodeLeaseNotHeld, "lease %s passed its local deadline without a confirmed renewal (ownership unknown)", l.ID())
	}
	return nil
}

// renew drives l's state machine until ctx ends; each renewal gets a third
// of the TTL, so a hung registry cannot hold a renewal past the deadline.
func renew(ctx context.Context, l *client.Lease, ttl time.Duration) {
	t := time.NewTicker(checkEvery(ttl))
	defer t.Stop()
	for {
		tctx, cancel := context.WithTimeout(ctx, ttl/3)
		_ = l.Tick(tctx)
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkEvery is how often ownership is checked: a tenth of the TTL, between
// 10 ms and 1 s.
func checkEvery(ttl time.Duration) time.Duration {
	return min(max(ttl/10, 10*time.Millisecond), time.Second)
}

// statusOf is the shell's exit status of a finished command.
func statusOf(ps *os.ProcessState, werr error) int {
	if ps == nil {
		if werr != nil {
			return 1
		}
		return 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return max(ps.ExitCode(), 0)
}
