package pulls

import (
	"context"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

var dA = digest.FromString("app manifest")

// A pull is stamped with Redis's clock, per repository, and the record
// expires TTL after its last pull.
func TestPullsRecord(t *testing.T) {
	storagetest.ForEachBackend(t, func(t *testing.T, b storagetest.Backend) {
		c := b.Client(t)
		p, ctx := New(c, b.Prefix, 0), context.Background()
		if got, err := p.Pulled(ctx, "team/app"); err != nil || len(got) != 0 {
			t.Fatalf("never pulled: %v %v", got, err)
		}
		before := time.Now().Add(-time.Minute)
		if err := p.Record(ctx, "team/app", dA); err != nil {
			t.Fatal(err)
		}
		other := digest.FromString("other")
		if err := p.Record(ctx, "team/other", other); err != nil {
			t.Fatal(err)
		}
		got, err := p.Pulled(ctx, "team/app")
		if err != nil || len(got) != 1 || got[dA].Before(before) || got[dA].After(time.Now().Add(time.Minute)) {
			t.Fatalf("pulled %v %v", got, err)
		}
		ttl, err := c.PTTL(ctx, p.key("team/app")).Result()
		if err != nil || ttl <= TTL-time.Hour || ttl > TTL {
			t.Fatalf("ttl %v %v", ttl, err)
		}
	})
}
