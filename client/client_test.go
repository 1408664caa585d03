package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fencegate/fencegate/domain"
)

func TestGatewayProblemsAreFencegateErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblemErr(w, &domain.Error{Code: domain.CodeQuarantined, Message: "different payload", ReceiptID: "R9"})
	}))
	defer srv.Close()
	_, err := New(srv.URL, "tok").PutObject(context.Background(), "b", "k", Fence{Grant: "g", Segment: 1}, nil, "")
	var fe *domain.Error
	if !errors.As(err, &fe) || fe.Code != domain.CodeQuarantined || fe.Message != "different payload" || fe.ReceiptID != "R9" {
		t.Fatalf("err %#v", err)
	}
	if IsUncertain(err) {
		t.Fatal("a gateway answer is not uncertain")
	}
}

func TestTransportFailuresAndForeign5xxAreUncertain(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway", http.StatusBadGateway) // a proxy, not Fencegate
	}))
	_, err := New(srv.URL, "tok").Renew(context.Background(), "L1", ttl)
	if !IsUncertain(err) {
		t.Fatalf("foreign 502: %v", err)
	}
	srv.Close()
	if _, err := New(srv.URL, "tok").Renew(context.Background(), "L1", ttl); !IsUncertain(err) {
		t.Fatalf("closed server: %v", err)
	}
}

func TestUpstreamAnswersAreNotGatewayErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/apis/payments/charges/1" || r.Header.Get("Fence-Segment") != "3" {
			t.Errorf("path %s segment %s", r.URL.Path, r.Header.Get("Fence-Segment"))
		}
		w.Header().Set("Fence-Receipt", "R3")
		w.Header().Set("Content-Type", "application/problem+json") // the upstream's own problem
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = io.WriteString(w, `{"type":"https://payments.example/declined","code":"DECLINED"}`)
	}))
	defer srv.Close()
	resp, err := New(srv.URL, "tok").CallAPI(context.Background(), "payments", "POST", "/charges/1", Fence{Grant: "g", Segment: 3}, nil, "")
	if err != nil || resp.Status != http.StatusPaymentRequired || resp.Receipt != "R3" {
		t.Fatalf("resp %+v err %v", resp, err)
	}
}

func TestObjectKeysKeepTheirSlashesAndAreEscaped(t *testing.T) {
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.EscapedPath()
		w.Header().Set("Fence-Token", "7")
		_, _ = io.WriteString(w, "data")
	}))
	defer srv.Close()
	rc, info, err := New(srv.URL, "tok").GetObject(context.Background(), "b", "dir/a b#c")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if got != "/v1/objects/b/dir/a%20b%23c" || info.FenceToken != 7 {
		t.Fatalf("path %s info %+v", got, info)
	}
}
