package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// credential is the upstream credential's value: fixed (from the
// environment), or read from a file and read again whenever the file
// changes (its modification time or size), so that a token renewed outside
// the gateway is sent from the next request on, without a restart. PayPal's
// OAuth access tokens, for one, expire after the expires_in the token
// answer gives (https://developer.paypal.com/api/rest/authentication/).
type credential struct {
	name   string // the canonical header it is sent in
	prefix string
	file   string // "" for a fixed value
	log    *slog.Logger
	api    string

	mu     sync.Mutex
	value  string
	mod    time.Time
	size   int64
	warned string // the last problem logged, so a lasting one is logged once
}

// newCredential reads the first value of cr: its environment variable's, or
// its file's.
func newCredential(api string, cr *Credentials, log *slog.Logger) (*credential, error) {
	c := &credential{name: http.CanonicalHeaderKey(cr.Header), prefix: cr.Prefix, file: cr.File, log: log, api: api,
		value: os.Getenv(cr.Env)}
	if c.file == "" {
		return c, nil
	}
	fi, err := os.Stat(c.file)
	if err != nil {
		return nil, err
	}
	if err := c.read(fi); err != nil {
		return nil, err
	}
	return c, nil
}

// read takes the file's content as the value (trailing newlines dropped).
// An empty file (caught mid-write by a writer that does not replace it
// atomically) is not a credential: the last value stays. The caller holds
// mu, or owns c.
func (c *credential) read(fi os.FileInfo) error {
	b, err := os.ReadFile(c.file)
	if err != nil {
		return err
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return fmt.Errorf("credentials file %s is empty", c.file)
	}
	c.value, c.mod, c.size = v, fi.ModTime(), fi.Size()
	return nil
}

// header is the header value to send now. A file that changed is read
// again; one that cannot be read keeps the last value (logged).
func (c *credential) header() string {
	if c.file == "" {
		return c.prefix + c.value
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fi, err := os.Stat(c.file)
	if err == nil && (!fi.ModTime().Equal(c.mod) || fi.Size() != c.size) {
		err = c.read(fi)
	}
	switch {
	case err == nil:
		c.warned = ""
	case err.Error() != c.warned:
		c.warned = err.Error()
		c.log.Warn("credentials file unreadable; sending the last value read", "api", c.api, "err", err)
	}
	return c.prefix + c.value
}
