package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/fencegate/fencegate/client"
)

// globals are the flags every verb accepts.
type globals struct {
	gateway   string
	token     string
	json      bool
	leaseFile string
}

// env is the process environment; tests replace it.
var env = os.Getenv

// stdin is where "-" reads from; tests replace it.
var stdin io.Reader = os.Stdin

// cmd is what a verb gets: its parsed flags, positional arguments and output.
type cmd struct {
	g      *globals
	args   []string
	out    io.Writer
	errOut io.Writer
	client *client.Client
	// rest are the arguments after "--", for a verb with rest set.
	rest []string
}

// verb is one fencectl command.
type verb struct {
	usage string
	help  string
	admin bool
	// flags registers the verb's own flags; run performs it.
	flags func(fs *flag.FlagSet) func(ctx context.Context, c *cmd) error
	nargs int // positional arguments required
	// rest: the arguments after the first "--" are not parsed but given as
	// cmd.rest (a command line to run).
	rest bool
}

// exitStatus makes fencectl exit with a status of a verb's choosing (the
// status of the command it ran).
type exitStatus struct {
	code int
	err  error // printed first, if not nil
}

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

var verbs = map[string]verb{}

func register(name string, v verb) { verbs[name] = v }

func run(args []string, stdout, stderr io.Writer) int {
	g := &globals{gateway: env("FENCEGATE_URL"), token: env("FENCEGATE_TOKEN"), leaseFile: ".fencectl-lease.json"}
	if g.gateway == "" {
		g.gateway = "http://127.0.0.1:8080"
	}
	top := flag.NewFlagSet("fencectl", flag.ContinueOnError)
	top.SetOutput(io.Discard)
	addGlobals(top, g)
	if err := top.Parse(args); err != nil || top.NArg() == 0 {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return 0
		}
		if g.json {
			msg := "give a command"
			if err != nil {
				msg = err.Error()
			}
			return report(stderr, usageError{msg}, true)
		}
		usage(stderr)
		return exitUsage
	}
	name := top.Arg(0)
	if name == "help" {
		usage(stdout)
		return 0
	}
	v, ok := verbs[name]
	if !ok {
		if g.json {
			return report(stderr, usageError{fmt.Sprintf("unknown command %q", name)}, true)
		}
		fmt.Fprintf(stderr, "fencectl: unknown command %q\n", name)
		usage(stderr)
		return exitUsage
	}
	fs := flag.NewFlagSet("fencectl "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addGlobals(fs, g)
	do := v.flags(fs)
	vargs, rest := top.Args()[1:], []string(nil)
	if v.rest {
		for i, a := range vargs {
			if a == "--" {
				vargs, rest = vargs[:i], vargs[i+1:]
				break
			}
		}
	}
	pos, err := parseInterleaved(fs, vargs)
	if errors.Is(err, flag.ErrHelp) {
		verbUsage(stdout, name, v, fs)
		return 0
	}
	if err == nil && len(pos) != v.nargs {
		err = usageError{fmt.Sprintf("%s takes %d argument(s), got %d", name, v.nargs, len(pos))}
	}
	if err != nil {
		if g.json {
			return report(stderr, usageError{fmt.Sprintf("fencectl %s: %v", name, err)}, true)
		}
		fmt.Fprintf(stderr, "fencectl %s: %v\n", name, err)
		verbUsage(stderr, name, v, fs)
		return exitUsage
	}
	c := &cmd{g: g, args: pos, out: stdout, errOut: stderr, client: client.New(g.gateway, g.token), rest: rest}
	if err := do(context.Background(), c); err != nil {
		var es exitStatus
		if errors.As(err, &es) {
			if es.err != nil {
				report(stderr, es.err, g.json)
			}
			return es.code
		}
		return report(stderr, err, g.json)
	}
	return exitOK
}

func addGlobals(fs *flag.FlagSet, g *globals) {
	fs.StringVar(&g.gateway, "gateway", g.gateway, "gateway URL (env FENCEGATE_URL)")
	fs.StringVar(&g.token, "token", g.token, "workload bearer token (env FENCEGATE_TOKEN)")
	fs.BoolVar(&g.json, "json", g.json, "print the raw JSON answer, and errors as one JSON object on stderr")
	fs.StringVar(&g.leaseFile, "lease-file", g.leaseFile, "where acquire keeps the lease for later verbs")
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments, and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: fencectl [--gateway URL] [--token T] [--json] [--lease-file F] COMMAND [args] [flags]")
	fmt.Fprintln(w, "\ncommands:")
	names := make([]string, 0, len(verbs))
	for n := range verbs {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, n := range names {
		v := verbs[n]
		admin := ""
		if v.admin {
			admin = " [admin token]"
		}
		fmt.Fprintf(tw, "  %s\t%s%s\n", v.usage, v.help, admin)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nAdmin commands need an admin token (--token or FENCEGATE_TOKEN), not a workload token.")
	fmt.Fprintln(w, "Run 'fencectl COMMAND -h' for a command's flags.")
	fmt.Fprintln(w, "Exit status: 0 done, 1 refused by the gateway (its code), 2 usage, 3 outcome unknown, 4 local failure,")
	fmt.Fprintln(w, "5 done but not recorded in the lease file (give the next write --segment);")
	fmt.Fprintln(w, "'run' exits with its command's status. With --json, errors are one JSON object on stderr.")
}

func verbUsage(w io.Writer, name string, v verb, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: fencectl %s\n  %s\n", v.usage, v.help)
	if v.admin {
		fmt.Fprintln(w, "  Needs an admin token (--token or FENCEGATE_TOKEN); workload tokens are refused.")
	}
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// emit prints v as indented JSON.
func emit(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table prints rows of label/value pairs aligned.
func table(w io.Writer, rows ...[2]string) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	for _, r := range rows {
		if r[1] != "" {
			fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
		}
	}
	tw.Flush()
}

// splitStoreKey splits STORE/KEY.
func splitStoreKey(s string) (store, key string, err error) {
	store, key, ok := strings.Cut(s, "/")
	if !ok || store == "" || key == "" {
		return "", "", usageError{fmt.Sprintf("want STORE/KEY, got %q", s)}
	}
	return store, key, nil
}
