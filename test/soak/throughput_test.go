package soak

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
)

// TestReclaimerThroughput measures one `registry serve` process's reclaimer
// on the filesystem driver: N queued blobs nobody links (deleted) and N
// queued blobs a repository links (reviewed and dropped), all due at once.
// It prints blobs reviewed and deleted per second.
func TestReclaimerThroughput(t *testing.T) {
	if testing.Short() {
		t.Skip("throughput measurement skipped in -short mode")
	}
	n := 500
	if v := os.Getenv("RECLAIM_SOAK_BLOBS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	addr, prefix, redisKind := soakRedis(t)
	root, raw := prepareStorage(t)
	ctx := context.Background()
	orphans, linked, bytes := seedBlobs(ctx, t, raw, n, prefix)
	queueDue(ctx, t, addr, prefix, append(orphans, linked...))

	opts := middlewareOptions([]string{addr}, prefix)
	opts["reclaimer"] = map[string]any{"enabled": true, "interval": "50ms", "batch": 200, "workers": 4, "lease": "30s"}
	p := registrytest.StartProcess(t, registrytest.WithRootDirectory(root),
		registrytest.WithStorageMiddleware("reclaim", opts), quiet)
	start := time.Now()
	var st gcStatus
	var err error
	if !poll(ctx, 20*time.Millisecond, 5*time.Minute, func() bool {
		st, err = status(ctx, p.Registry)
		return err == nil && st.Reclaimer.Reviewed >= int64(2*n)
	}) {
		t.Fatalf("reclaimer did not review %d blobs in 5 minutes: %+v (%v)", 2*n, st.Reclaimer, err)
	}
	elapsed := time.Since(start)
	for _, d := range orphans {
		if _, err := os.Stat(root + layout.BlobDataPath(d)); err == nil {
			t.Fatalf("orphan %s not deleted", d)
		}
	}
	for _, d := range linked {
		if _, err := os.Stat(root + layout.BlobDataPath(d)); err != nil {
			t.Fatalf("linked blob %s lost: %v", d, err)
		}
	}
	if st.Reclaimer.Deleted != int64(n) || st.Reclaimer.BytesFreed != bytes {
		t.Fatalf("deleted %d (%d bytes), want %d (%d bytes)", st.Reclaimer.Deleted, st.Reclaimer.BytesFreed, n, bytes)
	}
	t.Logf("reclaimer throughput (filesystem driver, %s, 1 process, 4 workers, batch 200): %d blobs reviewed in %v "+
		"(%.0f reviewed/s, %.0f deleted/s wall clock; %.0f reviewed/s of tick time); kept %v",
		redisKind, 2*n, elapsed.Round(time.Millisecond), float64(2*n)/elapsed.Seconds(), float64(n)/elapsed.Seconds(),
		st.Reclaimer.ReviewedPerSec, st.Reclaimer.KeptBy)
}

// seedBlobs writes 2n blobs: n orphans nobody links (their bytes summed)
// and n a repository links.
func seedBlobs(ctx context.Context, t *testing.T, raw storagedriver.StorageDriver, n int, salt string) (orphans, linked []digest.Digest, bytes int64) {
	t.Helper()
	links := linkdb.NewReverseLinks(raw)
	for i := range 2 * n {
		content := []byte(fmt.Sprintf("throughput blob %d %s", i, salt))
		d := digest.FromBytes(content)
		if err := raw.PutContent(ctx, layout.BlobDataPath(d), content); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			orphans = append(orphans, d)
			bytes += int64(len(content))
			continue
		}
		if err := links.Put(ctx, d, reclaim.RepoLink{Repo: "bench/app", Kind: reclaim.LinkLayer}); err != nil {
			t.Fatal(err)
		}
		linked = append(linked, d)
	}
	return orphans, linked, bytes
}

// queueDue queues blobs for review, due at once, with an epoch an hour old.
func queueDue(ctx context.Context, t *testing.T, addr, prefix string, blobs []digest.Digest) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	// The tracker has recorded for longer than W: the reclaimer may delete.
	rc.Set(ctx, prefix+"since", strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10), 0)
	if err := redisstate.NewQueue(rc, prefix, 0).Enqueue(ctx, 0, blobs...); err != nil {
		t.Fatal(err)
	}
}
