package etcd

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate"
)

// translate turns etcd client, gRPC and context errors into *fencegate.Error:
// no leader, an unreachable cluster, a closed client and cancelled or expired
// contexts are BACKEND_UNAVAILABLE (the operation may or may not have
// committed: retry with the same request ID); ABORTED is BACKEND_CONFLICT; a
// request etcd refuses as too large INVALID_REQUEST; anything else INTERNAL.
func translate(err error, op string) error {
	if err == nil {
		return nil
	}
	var fe *fencegate.Error
	if errors.As(err, &fe) {
		return err
	}
	msg := op + ": registry etcd"
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, clientv3.ErrNoAvailableEndpoints) {
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, msg+" unavailable")
	}
	switch grpcCode(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.ResourceExhausted:
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, msg+" unavailable")
	case codes.Aborted:
		return fencegate.Wrap(err, fencegate.CodeBackendConflict, msg+" conflict")
	case codes.InvalidArgument:
		if errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) {
			return fencegate.Wrap(err, fencegate.CodeInvalidRequest, msg+" refused the request as too large")
		}
	}
	return fencegate.Wrap(err, fencegate.CodeInternal, msg+" error")
}

// grpcCode is the gRPC code of an etcd server error, codes.Unknown for others.
func grpcCode(err error) codes.Code {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code()
	}
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return codes.Unknown
}
