// Command gateway runs Fencegate.
//
//	gateway dev   [flags]   everything in one process on embedded defaults
//	gateway serve --config FILE [flags]
//	gateway registry [--config FILE] [flags]   the lease registry alone
//	gateway healthcheck [URL]   exit 0 when URL (default http://127.0.0.1:8080/healthz) answers 200
//	gateway version             version, VCS revision and Go version
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fencegate/fencegate/config"
	"github.com/fencegate/fencegate/internal/app"
	"github.com/fencegate/fencegate/internal/logctx"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var cfg config.Config
	switch os.Args[1] {
	case "dev":
		cfg = config.Dev()
	case "serve":
		cfg = config.Default()
	case "registry":
		cfg = config.RegistryOnly()
	case "-h", "--help", "help":
		usage()
		return
	case "version", "--version":
		printVersion(os.Stdout)
		return
	case "healthcheck":
		os.Exit(healthcheck(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "gateway: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	if err := parseFlags(os.Args[1], os.Args[2:], &cfg); err != nil {
		if errors.Is(err, flag.ErrHelp) { // `gateway serve --help`: the flags were printed, as asked
			return
		}
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(2)
	}
	log, err := logctx.NewLogger(os.Stderr, cfg.Log.Format, cfg.LogLevel())
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(2)
	}
	if fp := os.Getenv("FENCEGATE_FAILPOINT"); fp != "" {
		if os.Args[1] == "dev" { // the crash tests' hook (e2e/crash_test.go); never in serve
			cfg.Failpoint = fp
		} else {
			log.Warn("FENCEGATE_FAILPOINT is ignored outside gateway dev", "failpoint", fp)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := app.Build(ctx, cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		a.Close() // os.Exit runs no deferred call: what Build opened is closed first
		os.Exit(1)
	}
	a.Close()
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  common: [--log-format text|json] [--log-level debug|info|warn|error] [--otlp-endpoint URL]
  gateway dev   [--addr A] [--metrics-addr M [--pprof]] [--data-dir D] [--identity NAME=TOKEN]... [--admin-token T]... [--gateway NAME=TOKEN]... [--store NAME=URL]... [--fence-store URL] [--registry-backend URL] [--allow-volatile-backend] [--status-mode proof|query] [--config FILE] [--break-glass]
  gateway serve --config FILE [--addr A] [--metrics-addr M [--pprof]] [--data-dir D] [--fence-store URL] [--registry-url URL] [--registry-backend URL] [--allow-volatile-backend] [--status-mode proof|query] [--trust-bundle FILE] [--identity NAME=TOKEN]... [--admin-token T]... [--gateway NAME=TOKEN]... [--store NAME=URL]... [--break-glass]
  gateway healthcheck [URL]   (default http://127.0.0.1:8080/healthz; exit 0 on 200)
  gateway version
  gateway registry [--config FILE] [--addr A] [--metrics-addr M [--pprof]] [--data-dir D] [--identity NAME=TOKEN]... [--admin-token T]... [--gateway NAME=TOKEN]... [--registry-backend URL] [--allow-volatile-backend] [--fence-store URL] [--trust-bundle FILE] [--status-mode proof|query] [--break-glass]
`)
}

// parseFlags applies the config file (if any) and then the flags over cfg.
func parseFlags(cmd string, args []string, cfg *config.Config) error {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	configFile := fs.String("config", "", "YAML config file")
	addr := fs.String("addr", "", "listen address (default "+cfg.Addr+")")
	metricsAddr := fs.String("metrics-addr", "", "operator listener serving /metrics (default: none)")
	pprof := fs.Bool("pprof", false, "serve /debug/pprof/ (CPU, heap, execution trace...) on the operator listener (--metrics-addr) too")
	dataDir := fs.String("data-dir", "", "directory for embedded state (default "+cfg.DataDir+")")
	fenceStore := fs.String("fence-store", "", `fence store: "embedded" or a postgres:// URL`)
	statusMode := fs.String("status-mode", "", "proof (Fence-Status headers) or query (ask the registry)")
	allowVolatile := fs.Bool("allow-volatile-backend", false, "accept a Redis registry backend that does not fsync every write or may evict keys (logged)")
	logFormat := fs.String("log-format", "", "log format: text (default) or json")
	logLevel := fs.String("log-level", "", "log level: debug, info (default), warn or error")
	otlpEndpoint := fs.String("otlp-endpoint", "", "export OpenTelemetry spans to this OTLP/HTTP collector URL (default: off)")
	registryURL := fs.String("registry-url", "", "registry in another process (registryURL): its trust bundle is fetched, query mode asks it")
	trustBundle := fs.String("trust-bundle", "", "trust bundle file (trustBundle)")
	registryBackend := fs.String("registry-backend", "", `registry backend: "embedded", postgres://..., redis://HOST:PORT?prefix=P or etcd://HOST:PORT?prefix=P`)
	var identities []config.Identity
	fs.Func("identity", "workload identity NAME=TOKEN (repeatable)", func(v string) error {
		name, tok, ok := strings.Cut(v, "=")
		if !ok || name == "" || tok == "" {
			return fmt.Errorf("--identity wants NAME=TOKEN")
		}
		identities = append(identities, config.Identity{Name: name, Token: tok})
		return nil
	})
	// Flags are gathered here and laid over the config file after it is
	// loaded: the file's lists would replace ones appended to cfg now.
	var admins, gateways []config.Identity
	fs.Func("admin-token", "operator bearer credential for /v1/admin (repeatable)", func(v string) error {
		admins = append(admins, config.Identity{Token: v})
		return nil
	})
	fs.Func("gateway", "gateway identity NAME=TOKEN whose status queries the registry answers for any lease (repeatable)", func(v string) error {
		name, tok, ok := strings.Cut(v, "=")
		if !ok || name == "" || tok == "" {
			return fmt.Errorf("--gateway wants NAME=TOKEN")
		}
		gateways = append(gateways, config.Identity{Name: name, Token: tok})
		return nil
	})
	breakGlass := fs.Bool("break-glass", false, "allow this start to switch validation off (enforce -> shadow, a removed enforce rule); logged and counted")
	stores := map[string]string{}
	fs.Func("store", "object store NAME=URL (repeatable): local:DIR or s3://BUCKET[/PREFIX]?endpoint=URL&region=R&pathStyle=true", func(v string) error {
		name, u, ok := strings.Cut(v, "=")
		if !ok || name == "" || u == "" {
			return fmt.Errorf("--store wants NAME=URL")
		}
		stores[name] = u
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *configFile != "" {
		if err := config.Load(*configFile, cfg); err != nil {
			return err
		}
	} else if cmd == "serve" {
		return fmt.Errorf("serve needs --config FILE")
	}
	for _, set := range []struct {
		dst *string
		v   string
	}{{&cfg.Addr, *addr}, {&cfg.MetricsAddr, *metricsAddr}, {&cfg.DataDir, *dataDir}, {&cfg.FenceStore, *fenceStore}, {&cfg.StatusMode, *statusMode},
		{&cfg.Log.Format, *logFormat}, {&cfg.Log.Level, *logLevel}, {&cfg.Tracing.Endpoint, *otlpEndpoint},
		{&cfg.RegistryURL, *registryURL}, {&cfg.TrustBundle, *trustBundle}} {
		if set.v != "" {
			*set.dst = set.v
		}
	}
	if *registryBackend != "" {
		if cfg.Registry == nil {
			return fmt.Errorf("--registry-backend needs a registry (gateway dev, or registry: in the config)")
		}
		cfg.Registry.Backend = *registryBackend
	}
	if *allowVolatile {
		if cfg.Registry == nil {
			return fmt.Errorf("--allow-volatile-backend needs a registry (gateway dev, or registry: in the config)")
		}
		cfg.Registry.AllowVolatileBackend = true
	}
	cfg.Identities = append(cfg.Identities, identities...)
	for _, a := range admins {
		cfg.Admins = append(cfg.Admins, config.Identity{Name: fmt.Sprintf("admin-%d", len(cfg.Admins)+1), Token: a.Token})
	}
	cfg.Gateways = append(cfg.Gateways, gateways...)
	cfg.BreakGlass = *breakGlass
	if *pprof {
		cfg.Pprof = true
	}
	if len(stores) > 0 && cfg.Stores == nil {
		cfg.Stores = map[string]string{}
	}
	for k, v := range stores {
		cfg.Stores[k] = v
	}
	if cmd == "dev" && len(cfg.Identities) == 0 {
		for _, name := range []string{"worker-a", "worker-b"} {
			tok := randomToken()
			cfg.Identities = append(cfg.Identities, config.Identity{Name: name, Token: tok})
			fmt.Printf("identity %s: Authorization: Bearer %s\n", name, tok)
		}
	}
	if cmd == "dev" && len(cfg.Admins) == 0 {
		tok := randomToken()
		cfg.Admins = append(cfg.Admins, config.Identity{Name: "admin", Token: tok})
		fmt.Printf("admin: Authorization: Bearer %s\n", tok)
	}
	return nil
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
