package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencegate/fencegate/proofs"
	"github.com/fencegate/fencegate/proofs/prooftest"
)

// Rule (maxChainAnswer's reason): a bundle the registry accepts may hold
// '<', '>', '&' and U+2028 raw (ParseBundle takes them, here in revoked key
// IDs), which the chain answer's JSON string would write as six bytes each;
// but the registry serves only documents Bundle.Marshal wrote, which
// escapes them already, so each link of GET /v1/trust-bundle/chain stays
// within twice its served document and 64 KiB.
func TestTheChainAnswerStaysWithinTwiceItsDocumentsForABundleOfEscapedCharacters(t *testing.T) {
	w := newS3World(t)
	ctx := context.Background()
	var answer atomic.Int64
	proxied := registryProxy(t, w.srv.URL, nil, func(r *http.Response) error {
		if r.Request.URL.Path != "/v1/trust-bundle/chain" {
			return nil
		}
		body, err := io.ReadAll(r.Body)
		answer.Store(int64(len(body)))
		r.Body = io.NopCloser(bytes.NewReader(body))
		return err
	})
	rep, _ := chainReplica(t, w, proxied, nil)

	// The operator's document: the bundle in force, one version up,
	// revoking key IDs made of the characters HTML escaping writes as
	// \u003c, \u003e, \u0026, and U+2028, all written raw.
	cur := w.app.auth.Verifier().Bundle()
	var ids []string
	for i := range 1000 {
		ids = append(ids, fmt.Sprintf("%s\u2028%d", strings.Repeat("<>&", 30), i))
	}
	rawDoc, _ := prooftest.RawRevokingDoc(t, cur, cur.Version()+1, ids)
	raw := string(rawDoc)
	if !strings.Contains(raw, "<>&\u2028") || len(raw) > proofs.MaxBundleSize {
		t.Fatalf("the operator's document (%d bytes) does not hold the characters raw", len(raw))
	}
	if _, err := w.app.auth.SetTrustBundle(ctx, []byte(raw)); err != nil {
		t.Fatal(err)
	}

	links, err := rep.remote.FetchChain(ctx, cur.Version())
	if err != nil || len(links) != 1 {
		t.Fatalf("the chain after version %d: %d links, %v; want the one published", cur.Version(), len(links), err)
	}
	doc := links[0].Bundle
	if strings.ContainsAny(doc, "<>&\u2028\u2029") {
		t.Fatal("the registry serves a document holding a character its chain answer writes as six bytes")
	}
	if limit := int64(2*len(doc) + 64<<10); answer.Load() > limit {
		t.Fatalf("the chain answer is %d bytes for a served document of %d; want at most %d (maxChainAnswer's share of one link)", answer.Load(), len(doc), limit)
	}
}
