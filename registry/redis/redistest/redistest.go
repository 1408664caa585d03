// Package redistest is test support for the Redis lease backend: a snapshot of
// every key under a prefix taken with DUMP and put back with RESTORE ... REPLACE,
// which is how tests roll a shared Redis server's registry state back in time
// (the fence-regression scenario of DESIGN §6) without touching other keys.
package redistest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Snap is the serialized state of every key under Prefix at one instant.
type Snap struct {
	Prefix string
	keys   []entry
}

type entry struct {
	key  string
	dump string
	ttl  time.Duration // 0: no TTL
}

// Len is the number of keys in the snapshot.
func (s Snap) Len() int { return len(s.keys) }

// Snapshot DUMPs every key under prefix with its remaining TTL. It SCANs the
// node client talks to: a standalone server, or on a cluster the keys of one
// hash tag must live on the node the client reaches.
func Snapshot(ctx context.Context, client redis.UniversalClient, prefix string) (Snap, error) {
	keys, err := scan(ctx, client, prefix)
	if err != nil {
		return Snap{}, err
	}
	s := Snap{Prefix: prefix}
	for _, k := range keys {
		dump, err := client.Dump(ctx, k).Result()
		if errors.Is(err, redis.Nil) { // gone since the scan: not part of the state
			continue
		} else if err != nil {
			return Snap{}, fmt.Errorf("dump %q: %w", k, err)
		}
		ttl, err := client.PTTL(ctx, k).Result()
		if err != nil {
			return Snap{}, fmt.Errorf("pttl %q: %w", k, err)
		}
		s.keys = append(s.keys, entry{key: k, dump: dump, ttl: max(ttl, 0)})
	}
	return s, nil
}

// Restore makes the keys under s.Prefix exactly what they were at the
// snapshot: keys created since are deleted, the others RESTOREd with REPLACE.
func (s Snap) Restore(ctx context.Context, client redis.UniversalClient) error {
	now, err := scan(ctx, client, s.Prefix)
	if err != nil {
		return err
	}
	keep := make(map[string]bool, len(s.keys))
	for _, e := range s.keys {
		keep[e.key] = true
	}
	for _, k := range now {
		if !keep[k] {
			if err := client.Del(ctx, k).Err(); err != nil {
				return fmt.Errorf("del %q: %w", k, err)
			}
		}
	}
	for _, e := range s.keys {
		if err := client.RestoreReplace(ctx, e.key, e.ttl, e.dump).Err(); err != nil {
			return fmt.Errorf("restore %q: %w", e.key, err)
		}
	}
	return nil
}

func scan(ctx context.Context, client redis.UniversalClient, prefix string) ([]string, error) {
	var out []string
	iter := client.Scan(ctx, 0, globEscape(prefix)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("scan %q: %w", prefix, err)
	}
	return out, nil
}

// globEscape quotes the characters Redis glob patterns treat specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
