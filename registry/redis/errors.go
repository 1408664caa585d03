package redis

import (
	"context"
	"errors"
	"io"
	"net"

	"github.com/redis/go-redis/v9"

	"github.com/fencegate/fencegate"
)

// translate turns go-redis, network and context errors into *fencegate.Error:
// an unreachable, loading, read-only or failing-over server, a closed client,
// an exhausted pool and cancelled contexts are BACKEND_UNAVAILABLE (the
// operation may or may not have run: retry with the same request ID); TRYAGAIN
// is BACKEND_CONFLICT; any other error reply (a script fault, OOM) INTERNAL.
func translate(err error, op string) error {
	if err == nil {
		return nil
	}
	var (
		fe  *fencegate.Error
		ne  net.Error
		msg = op + ": registry redis"
	)
	switch {
	case errors.As(err, &fe):
		return err
	case redis.IsTryAgainError(err):
		return fencegate.Wrap(err, fencegate.CodeBackendConflict, msg+" conflict")
	case redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsMasterDownError(err),
		redis.IsClusterDownError(err), redis.IsMaxClientsError(err),
		errors.Is(err, redis.ErrClosed), errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted),
		errors.As(err, &ne), errors.Is(err, net.ErrClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fencegate.Wrap(err, fencegate.CodeBackendUnavailable, msg+" unavailable")
	}
	return fencegate.Wrap(err, fencegate.CodeInternal, msg+" error")
}
