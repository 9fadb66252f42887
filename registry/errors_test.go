package registry

import (
	"testing"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/reclaim"
)

func TestStatusOfMapsEveryError(t *testing.T) {
	for err, want := range map[error]int{
		gc.ErrInvalidName:         400,
		errBadRequest:             400,
		errDigestAlgorithm:        400,
		gc.ErrRepositoryNotFound:  404,
		gc.ErrPlanNotFound:        404,
		reclaim.ErrRepositoryBusy: 409,
		gc.ErrPlanRepository:      404, // never says whose plan it is
		errTooLarge:               413,
		gc.ErrDisabled:            405,
		&gc.AbortError{Reason: reclaim.AbortRedisUntrusted}: 503,
		errUnauthenticated: 401,
	} {
		if got, _ := statusOf(err); got != want {
			t.Errorf("%v: %d, want %d", err, got, want)
		}
	}
}
