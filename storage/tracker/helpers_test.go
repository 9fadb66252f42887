package tracker

import (
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

var dA = digest.Digest("sha256:a3ed95caeb02ffe68cdd9fd84406680ae93d633cb16422d00e8a7c22955b46d4")

func newTestTracker(t *testing.T, b storagetest.Backend) *Tracker {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: b.Addr})
	t.Cleanup(func() { c.Close() })
	tr, err := NewTracker(c, TrackerOptions{Prefix: b.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
