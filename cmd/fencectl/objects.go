package main

import (
	"context"
	"crypto/sha256"
	"flag"
	"io"
	"os"
	"strconv"
	"sync"

	"github.com/fencegate/fencegate"
)

func init() {
	register("put", verb{usage: "put STORE/KEY FILE|- [--segment N] [--content-type T] [--progress auto|always|never]", nargs: 2,
		help: "fenced write of FILE (or stdin) under the lease", flags: putFlags})
	register("get", verb{usage: "get STORE/KEY [-o FILE]", nargs: 1, help: "read an object (to stdout or FILE)", flags: getFlags})
	register("delete", verb{usage: "delete STORE/KEY [--segment N]", nargs: 1, help: "fenced delete under the lease", flags: deleteFlags})
}

func putFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	seg := segFlag(fs)
	ctype := fs.String("content-type", "", "content type of the object")
	progress := progressMode("auto")
	fs.Var(&progress, "progress", "progress bar on stderr: auto (uploads of 4 MiB or more, stderr a terminal, no --json), always, never")
	return func(ctx context.Context, c *cmd) error {
		store, key, err := splitStoreKey(c.args[0])
		if err != nil {
			return err
		}
		var body io.Reader = stdin
		size := int64(-1)
		w := fencedWrite{method: "PUT", target: fencegate.ObjectTarget(store, key)}
		if c.args[1] != "-" {
			f, err := os.Open(c.args[1])
			if err != nil {
				return localError{err.Error(), err}
			}
			defer f.Close()
			if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
				size = st.Size()
				w.digest = sync.OnceValues(func() (string, bool) { return fileDigest(f) })
			}
			body = f
		}
		if w.digest == nil { // stdin or a pipe: its digest is known once sent whole
			h := &hashingReader{r: body, h: sha256.New()}
			body, w.digest = h, h.digest
		} else {
			// A FILE's digest is read from it again (fileDigest): hide its
			// Close from the transport.
			body = struct{ io.Reader }{body}
		}
		lf, fence, err := fenceFor(ctx, c, *seg, w)
		if err != nil {
			return err
		}
		defer lf.close()
		body, done := withProgress(c, progress, "put "+c.args[0], body, size)
		rc, err := c.client.PutObject(ctx, store, key, fence, body, *ctype)
		done(err == nil)
		if err != nil {
			return sent(c, lf, fence.Segment, w, err)
		}
		rerr := committed(c, lf, fence.Segment, rc.ID)
		if err := showReceipt(c, rc); err != nil {
			return err
		}
		return rerr
	}
}

func deleteFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	seg := segFlag(fs)
	return func(ctx context.Context, c *cmd) error {
		store, key, err := splitStoreKey(c.args[0])
		if err != nil {
			return err
		}
		w := fencedWrite{method: "DELETE", target: fencegate.ObjectTarget(store, key)}
		lf, fence, err := fenceFor(ctx, c, *seg, w)
		if err != nil {
			return err
		}
		defer lf.close()
		rc, err := c.client.DeleteObject(ctx, store, key, fence)
		if err != nil {
			return sent(c, lf, fence.Segment, w, err)
		}
		rerr := committed(c, lf, fence.Segment, rc.ID)
		if err := showReceipt(c, rc); err != nil {
			return err
		}
		return rerr
	}
}

func getFlags(fs *flag.FlagSet) func(context.Context, *cmd) error {
	out := fs.String("o", "", "write the object to this file and print its fence metadata")
	return func(ctx context.Context, c *cmd) error {
		store, key, err := splitStoreKey(c.args[0])
		if err != nil {
			return err
		}
		body, info, err := c.client.GetObject(ctx, store, key)
		if err != nil {
			return err
		}
		defer body.Close()
		if *out == "" {
			_, err := io.Copy(c.out, body)
			return err
		}
		f, err := os.Create(*out)
		if err != nil {
			return localError{err.Error(), err}
		}
		if _, err := io.Copy(f, body); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		if c.g.json {
			return emit(c.out, info)
		}
		table(c.out, [2]string{"file", *out}, [2]string{"size", strconv.FormatInt(info.Size, 10)},
			[2]string{"etag", info.ETag}, [2]string{"fence", strconv.FormatUint(info.FenceToken, 10)},
			[2]string{"segment", strconv.FormatUint(info.Segment, 10)}, [2]string{"operation", info.OperationID},
			[2]string{"receipt", info.Receipt})
		return nil
	}
}

func showReceipt(c *cmd, r fencegate.Receipt) error {
	if c.g.json {
		return emit(c.out, r)
	}
	table(c.out, [2]string{"receipt", r.ID}, [2]string{"state", string(r.State)},
		[2]string{"target", r.Target}, [2]string{"fence", strconv.FormatUint(r.FenceToken, 10)},
		[2]string{"segment", strconv.FormatUint(r.Segment, 10)}, [2]string{"operation", r.OperationID},
		[2]string{"version", r.Version}, [2]string{"error", r.Error})
	return nil
}
