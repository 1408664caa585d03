package config

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// LeaseBackend is registry.backend parsed and checked: the one place its
// URL is read, so the app opens what Validate accepted.
type LeaseBackend struct {
	// Kind is "embedded", "postgres", "redis" or "etcd".
	Kind string
	// DSN is the postgres connection URL as written.
	DSN string
	// Hosts are the redis address (one) or the etcd endpoints.
	Hosts []string
	// Prefix namespaces the redis or etcd keys ("" for the default).
	Prefix string
	// Replicas and Wait: a redis write waits for this many replicas (WAIT),
	// up to Wait; 0 replicas for none.
	Replicas int
	Wait     time.Duration
}

// ParseLeaseBackend reads "embedded", postgres://..., redis://HOST:PORT
// [?prefix=P&replicas=N&waitMs=MS] or etcd://HOST:PORT[,HOST:PORT][?prefix=P].
// Unknown parameters are errors.
func ParseLeaseBackend(raw string) (LeaseBackend, error) {
	if raw == "embedded" {
		return LeaseBackend{Kind: "embedded"}, nil
	}
	bad := func(format string, args ...any) (LeaseBackend, error) {
		return LeaseBackend{}, fmt.Errorf("registry.backend %q: "+format, append([]any{Redacted(raw)}, args...)...)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return bad(`must be "embedded" or a postgres://, redis:// or etcd:// URL`)
	}
	if u.User != nil && (u.Scheme == "redis" || u.Scheme == "etcd") {
		return bad("carries a user or password, which the %s backend does not send: it would be ignored", u.Scheme)
	}
	q := u.Query()
	allowed := map[string][]string{"redis": {"prefix", "replicas", "waitMs"}, "etcd": {"prefix"}}
	switch u.Scheme {
	case "postgres", "postgresql":
		return LeaseBackend{Kind: "postgres", DSN: raw}, nil
	case "redis", "etcd":
		for k := range q {
			if !contains(allowed[u.Scheme], k) {
				return bad("unknown parameter %q", k)
			}
		}
	default:
		return bad(`must be "embedded" or a postgres://, redis:// or etcd:// URL`)
	}
	b := LeaseBackend{Kind: u.Scheme, Prefix: q.Get("prefix"), Hosts: strings.Split(u.Host, ",")}
	if u.Scheme == "redis" && len(b.Hosts) != 1 {
		return bad("redis takes one HOST:PORT")
	}
	if n := q.Get("replicas"); n != "" {
		if b.Replicas, err = strconv.Atoi(n); err != nil || b.Replicas < 0 {
			return bad("replicas must be a non-negative integer")
		}
		b.Wait = time.Second
	}
	if ms := q.Get("waitMs"); ms != "" {
		v, err := strconv.Atoi(ms)
		if err != nil || v < 0 || b.Replicas == 0 {
			return bad("waitMs must be a non-negative integer, with replicas")
		}
		b.Wait = time.Duration(v) * time.Millisecond
	}
	return b, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Redacted is a URL as logs and errors may show it: the password of its
// user information replaced (url.URL.Redacted), and so is the value of every
// query parameter whose name says password (libpq's password and
// sslpassword, https://www.postgresql.org/docs/current/libpq-connect.html);
// nothing of it when it is not a URL with a scheme (it does not parse, or is
// a key=value connection string that may carry password=...) unless it is a
// plain word ("embedded").
func Redacted(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" {
		if strings.ContainsAny(raw, "=@:/ \t") {
			return "(a value that is not a URL)"
		}
		return raw
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			u.RawQuery = "(a query that does not parse)" // it may hold a password all the same
		} else {
			changed := false
			for k := range q {
				if strings.Contains(strings.ToLower(k), "pass") {
					q.Set(k, "xxxxx")
					changed = true
				}
			}
			if changed {
				u.RawQuery = q.Encode()
			}
		}
	}
	return u.Redacted()
}
