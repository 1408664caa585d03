package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate"
	"github.com/fencegate/fencegate/config"
)

// BenchmarkS3FrontDoorVsREST compares one small fenced write through the S3
// front door (aws-sdk-go-v2, SigV4, arrival-order segment, registry lookup
// of the credential) with the same write through PUT /v1/objects (fence
// headers, the client's segment), on one gateway over loopback in the same
// run: go test -run X -bench S3FrontDoorVsREST ./internal/app/
func BenchmarkS3FrontDoorVsREST(b *testing.B) {
	cfg := config.Dev()
	cfg.DataDir = b.TempDir()
	cfg.StatusMode = "query"
	cfg.Identities = []config.Identity{{Name: "worker-a", Token: "token-a"}}
	a, err := Build(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(a.Close)
	a.ready.Store(true)
	srv := httptest.NewServer(a.handler)
	b.Cleanup(srv.Close)
	acquire := func(resource string) fencegate.LeaseAnswer {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/leases", strings.NewReader(
			`{"resource":"`+resource+`","requestId":"`+resource+`","ttlMs":600000,"operationId":"op","s3Credentials":true}`))
		req.Header.Set("Authorization", "Bearer token-a")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var l fencegate.LeaseAnswer
		_ = json.NewDecoder(resp.Body).Decode(&l)
		return l
	}
	b.Run("rest", func(b *testing.B) {
		l := acquire("local/bench-rest")
		for i := range b.N {
			req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/v1/objects/local/bench-rest/k%d", srv.URL, i), strings.NewReader("payload"))
			req.Header.Set("Authorization", "Bearer token-a")
			req.Header.Set("Fence-Grant", l.Grant)
			req.Header.Set("Fence-Segment", fmt.Sprint(i+1))
			resp, err := http.DefaultClient.Do(req)
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("put: %v %v", resp, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	b.Run("s3", func(b *testing.B) {
		l := acquire("local/bench-s3")
		c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(srv.URL), UsePathStyle: true,
			Credentials: credentials.NewStaticCredentialsProvider(l.S3Credentials.AccessKeyID, l.S3Credentials.SecretAccessKey, "")})
		for i := range b.N {
			if _, err := c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("local"),
				Key: aws.String(fmt.Sprintf("bench-s3/k%d", i)), Body: strings.NewReader("payload")}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
