package testenv_test

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/internal/testenv"
)

func redisGet(t *testing.T, r *testenv.Redis, key string) string {
	t.Helper()
	v, err := r.Do("GET", key)
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

func redisSet(t *testing.T, r *testenv.Redis, key, value string) {
	t.Helper()
	if got, err := r.Do("SET", key, value); err != nil || got != "OK" {
		t.Fatalf("SET %s: %q %v", key, got, err)
	}
}

func TestOwnRedisKilledAndRestartedEmptyHasNoKeys(t *testing.T) {
	r := testenv.OwnRedis(t)
	redisSet(t, r, "k", "v")
	r.RestartEmpty()
	if v := redisGet(t, r, "k"); v != "" {
		t.Fatalf("after RestartEmpty: k = %q", v)
	}
}

func TestOwnRedisDurableKeepsEveryWriteAcrossKill(t *testing.T) {
	r := testenv.OwnRedis(t, testenv.RedisDurable())
	redisSet(t, r, "k", "v")
	r.Kill()
	r.Start()
	if v := redisGet(t, r, "k"); v != "v" {
		t.Fatalf("after kill -9 of a durable server: k = %q", v)
	}
}

func TestOwnRedisRestoreRDBGoesBackToTheDump(t *testing.T) {
	for name, opts := range map[string][]testenv.RedisOption{"volatile": nil, "durable": {testenv.RedisDurable()}} {
		t.Run(name, func(t *testing.T) {
			r := testenv.OwnRedis(t, opts...)
			redisSet(t, r, "k", "old")
			snap := r.Save()
			redisSet(t, r, "k", "new")
			redisSet(t, r, "later", "x")
			r.RestoreRDB(snap)
			if v := redisGet(t, r, "k"); v != "old" {
				t.Fatalf("after restore: k = %q", v)
			}
			if v := redisGet(t, r, "later"); v != "" {
				t.Fatalf("after restore: a later key survived: %q", v)
			}
		})
	}
}

func TestOwnEtcdRestoreSnapshotGoesBackAndKillKeepsData(t *testing.T) {
	e := testenv.OwnEtcd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dial := func() *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint()}, DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	get := func(c *clientv3.Client, k string) string {
		resp, err := c.Get(ctx, k)
		if err != nil {
			t.Fatalf("get %s: %v", k, err)
		}
		if len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	c := dial()
	if _, err := c.Put(ctx, "k", "old"); err != nil {
		t.Fatal(err)
	}
	snap := e.Snapshot()
	if _, err := c.Put(ctx, "k", "new"); err != nil {
		t.Fatal(err)
	}
	_ = c.Close()
	e.Kill()
	e.Start()
	c = dial()
	if v := get(c, "k"); v != "new" {
		t.Fatalf("after kill -9 and start: k = %q", v)
	}
	_ = c.Close()
	e.Restore(snap)
	c = dial()
	defer c.Close()
	if v := get(c, "k"); v != "old" {
		t.Fatalf("after restore: k = %q", v)
	}
}
