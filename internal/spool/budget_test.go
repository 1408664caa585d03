package spool_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/spool"
)

// TestBodyLongerThanItDeclaredDoesNotHoldMemoryOutsideTheBudget: a body
// that announced fewer bytes than it brings (an aws-chunked body's
// x-amz-decoded-content-length, checked only once it is read) holds in
// memory no more than it took from the budget: the rest of it goes to a
// file, so the bodies in memory never exceed the budget. The body is kept
// whole and its digest covers every byte.
func TestBodyLongerThanItDeclaredDoesNotHoldMemoryOutsideTheBudget(t *testing.T) {
	dir := t.TempDir()
	p := spool.NewPool(1000, 1000)
	liar := strings.Repeat("a", 900)
	b1, err := p.Read(dir, strings.NewReader(liar), 0, 10000) // declares 0, brings 900
	if err != nil {
		t.Fatal(err)
	}
	defer b1.Close()
	b2, err := p.Read(dir, strings.NewReader(strings.Repeat("b", 1000)), 1000, 10000)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if b1.InMemory() && b2.InMemory() {
		t.Fatalf("1900 bytes of bodies in memory within a budget of 1000")
	}
	got, err := io.ReadAll(b1.Reader())
	if err != nil || string(got) != liar || b1.Size != 900 || b1.Digest() != digestOf(liar) {
		t.Fatalf("the longer body: %d bytes (%v), size %d, digest %s", len(got), err, b1.Size, b1.Digest())
	}
}

func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}
