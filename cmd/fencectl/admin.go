package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/fencegate/fencegate"
)

func init() {
	register("revoke-epoch", verb{usage: "revoke-epoch N", nargs: 1, admin: true,
		help: "revoke issuer epoch N: its grants and proofs are refused (POST /v1/admin/epochs/{n}/revoke)", flags: revokeEpochFlags})
	register("rotate-key", verb{usage: "rotate-key", admin: true,
		help: "rotate the signing key, with an overlap window (POST /v1/admin/keys/rotate)", flags: rotateKeyFlags})
	register("set-floor", verb{usage: "set-floor N", nargs: 1, admin: true,
		help: "make every later fence greater than N (POST /v1/admin/floor)", flags: setFloorFlags})
	register("mode", verb{usage: "mode PATTERN enforce|shadow [--break-glass]", nargs: 2, admin: true,
		help: "set the enforcement mode of matching resources (PUT /v1/admin/modes)", flags: modeFlags})
	register("modes", verb{usage: "modes [--limit N] [--cursor C]", admin: true,
		help: "list the enforcement modes in force, a page at a time (GET /v1/admin/modes)", flags: modesFlags})
	register("binding", verb{usage: "binding STORE/KEY", nargs: 1, admin: true,
		help: "show the resource an object key is bound to (GET /v1/admin/bindings/{store}/{key})", flags: bindingFlags(false)})
	register("unbind", verb{usage: "unbind STORE/KEY", nargs: 1, admin: true,
		help: "clear an object key's binding once no live lease covers it (DELETE /v1/admin/bindings/{store}/{key})", flags: bindingFlags(true)})
	register("bump-policy", verb{usage: "bump-policy", admin: true,
		help: "raise the policy generation: older grants become POLICY_STALE (POST /v1/admin/policy/bump)", flags: bumpPolicyFlags})
}

func uintArg(s string) (uint64, error) {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, usageError{fmt.Sprintf("want a non-negative integer, got %q", s)}
	}
	return n, nil
}

func revokeEpochFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	return func(ctx context.Context, c *cmd) error {
		n, err := uintArg(c.args[0])
		if err != nil {
			return err
		}
		return showAdmin(c, fmt.Sprintf("issuer epoch %d revoked", n))(c.client.RevokeEpoch(ctx, n))
	}
}

func rotateKeyFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	return func(ctx context.Context, c *cmd) error {
		return showAdmin(c, "signing key rotated")(c.client.RotateKey(ctx))
	}
}

func setFloorFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	return func(ctx context.Context, c *cmd) error {
		n, err := uintArg(c.args[0])
		if err != nil {
			return err
		}
		return showAdmin(c, fmt.Sprintf("fence floor %d recorded: new fences are above it and above every fence already issued (see issuance below)", n))(c.client.SetFloor(ctx, n))
	}
}

func modeFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	breakGlass := fs.Bool("break-glass", false, "allow leaving enforce mode in an emergency")
	return func(ctx context.Context, c *cmd) error {
		mode := c.args[1]
		if mode != "enforce" && mode != "shadow" {
			return usageError{fmt.Sprintf("mode is enforce or shadow, not %q", mode)}
		}
		return showAdmin(c, fmt.Sprintf("%s is now in %s mode", c.args[0], mode))(c.client.SetMode(ctx, c.args[0], mode, *breakGlass))
	}
}

func modesFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	page := pageFlags(fs)
	return func(ctx context.Context, c *cmd) error {
		p, err := c.client.Modes(ctx, *page)
		if err != nil {
			return err
		}
		if c.g.json {
			return emit(c.out, p)
		}
		if len(p.Modes) == 0 {
			fmt.Fprintln(c.out, "no mode rules: every resource is enforced")
		}
		for _, m := range p.Modes {
			fmt.Fprintf(c.out, "%-8s %s\n", m.Mode, m.Pattern)
		}
		verb := "modes"
		if page.Limit > 0 {
			verb += " --limit " + strconv.Itoa(page.Limit)
		}
		nextHint(c, verb, p.Next)
		return nil
	}
}

func bumpPolicyFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	return func(ctx context.Context, c *cmd) error {
		return showAdmin(c, "policy generation raised")(c.client.BumpPolicy(ctx))
	}
}

// showAdmin prints an admin answer: the raw JSON with --json, else done and
// the answer on one line.
func showAdmin(c *cmd, done string) func(json.RawMessage, error) error {
	return func(raw json.RawMessage, err error) error {
		if err != nil {
			return err
		}
		if c.g.json {
			if len(raw) == 0 {
				raw = json.RawMessage("{}")
			}
			var v any
			if json.Unmarshal(raw, &v) != nil {
				return fencegate.Errorf(fencegate.CodeInternal, "admin answer is not JSON")
			}
			return emit(c.out, v)
		}
		fmt.Fprintln(c.out, done)
		if len(raw) > 0 {
			fmt.Fprintf(c.out, "%s\n", raw)
		}
		return nil
	}
}

// bindingFlags reads (or, with clear, clears) the binding of STORE/KEY.
func bindingFlags(clear bool) func(fs *flag.FlagSet) func(context.Context, *cmd) error {
	return func(fs *flag.FlagSet) func(context.Context, *cmd) error {
		return func(ctx context.Context, c *cmd) error {
			store, key, ok := strings.Cut(c.args[0], "/")
			if !ok || store == "" || key == "" {
				return usageError{fmt.Sprintf("want STORE/KEY, got %q", c.args[0])}
			}
			if clear {
				return showAdmin(c, "binding of "+c.args[0]+" cleared: the next accepted write binds it")(c.client.ClearBinding(ctx, store, key))
			}
			return showAdmin(c, "binding of "+c.args[0]+":")(c.client.Binding(ctx, store, key))
		}
	}
}
