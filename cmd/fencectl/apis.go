package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/client"
)

func init() {
	register("call", verb{usage: "call API METHOD PATH [--data @FILE|TEXT] [--content-type T] [--segment N]", nargs: 3,
		help: "fenced call to a fronted API under the lease", flags: callFlags})
}

func callFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	seg := segFlag(fs)
	data := fs.String("data", "", "request body: TEXT, or @FILE to read it from FILE")
	ctype := fs.String("content-type", "application/json", "content type of the body")
	return func(ctx context.Context, c *cmd) error {
		method := strings.ToUpper(c.args[1])
		if err := client.CheckFencedMethod(method); err != nil {
			// As client.CallAPI refuses, but before the lease file is
			// touched: a usage mistake.
			return usageError{fencegate.ErrorMessage(err) + " (reads go to the API's read routes)"}
		}
		body := []byte(*data)
		if name, ok := strings.CutPrefix(*data, "@"); ok {
			b, err := os.ReadFile(name)
			if err != nil {
				return localError{err.Error(), err}
			}
			body = b
		}
		sum := sha256.Sum256(body)
		w := fencedWrite{method: method, target: fencegate.APITarget(c.args[0], c.args[2]),
			digest: func() (string, bool) { return "sha256:" + hex.EncodeToString(sum[:]), true }}
		lf, fence, err := fenceFor(ctx, c, *seg, w)
		if err != nil {
			return err
		}
		defer lf.close()
		resp, err := c.client.CallAPI(ctx, c.args[0], method, c.args[2], fence, body, *ctype)
		if err != nil {
			return sent(c, lf, fence.Segment, w, err)
		}
		rerr := committed(c, lf, fence.Segment, resp.Receipt) // the answer is shown either way
		if c.g.json {
			if err := emit(c.out, map[string]any{"status": resp.Status, "receipt": resp.Receipt, "replay": resp.Replay, "body": string(resp.Body)}); err != nil {
				return err
			}
			return rerr
		}
		replay := ""
		if resp.Replay {
			replay = " (replay: upstream not called again)"
		}
		fmt.Fprintf(c.out, "upstream answered %d, receipt %s%s\n%s\n", resp.Status, resp.Receipt, replay, resp.Body)
		return rerr
	}
}
