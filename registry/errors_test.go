package registry

import (
	"testing"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
)

func TestStatusOfMapsEveryError(t *testing.T) {
	for err, want := range map[error]int{
		collector.ErrInvalidName:        400,
		errBadRequest:                   400,
		errDigestAlgorithm:              400,
		collector.ErrRepositoryNotFound: 404,
		collector.ErrPlanNotInMemory:    404,
		reclaim.ErrRepositoryBusy:       409,
		collector.ErrPlanRepository:     404, // never says whose plan it is
		errTooLarge:                     413,
		collector.ErrDisabled:           405,
		&collector.AbortError{Reason: reclaim.AbortRedisUntrusted}: 503,
		errUnauthenticated: 401,
	} {
		if got, _ := statusOf(err); got != want {
			t.Errorf("%v: %d, want %d", err, got, want)
		}
	}
}
