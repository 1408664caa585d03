package s3

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencegate/fencegate"
)

var _ fencegate.ObjectLister = (*Store)(nil)

// probeDir is where the start-up probe writes its scratch keys; they are
// never listed.
const probeDir = ".fencegate-probe/"

// List lists the store's keys under its prefix with ListObjectsV2
// (StartAfter, MaxKeys), the prefix stripped and the probe's keys left out.
// It reports only what the listing shows: size, ETag and time, not the
// content type or metadata.
func (s *Store) List(ctx context.Context, prefix, after string, limit int) ([]fencegate.ObjectInfo, bool, error) {
	var out []fencegate.ObjectInfo
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix)}
	if after != "" {
		in.StartAfter = aws.String(s.prefix + after)
	}
	for {
		in.MaxKeys = aws.Int32(int32(min(max(limit-len(out), 1), 1000)))
		page, err := s.client.ListObjectsV2(ctx, in)
		if err != nil {
			return nil, false, s.translate(err, "list", prefix, false)
		}
		for _, o := range page.Contents {
			key := strings.TrimPrefix(aws.ToString(o.Key), s.prefix)
			if strings.HasPrefix(key, probeDir) {
				continue
			}
			if len(out) == limit {
				return out, true, nil
			}
			out = append(out, fencegate.ObjectInfo{Key: key, ETag: aws.ToString(o.ETag), Size: aws.ToInt64(o.Size),
				LastModified: aws.ToTime(o.LastModified)})
		}
		if !aws.ToBool(page.IsTruncated) || page.NextContinuationToken == nil {
			return out, false, nil
		}
		in.ContinuationToken, in.StartAfter = page.NextContinuationToken, nil
	}
}
