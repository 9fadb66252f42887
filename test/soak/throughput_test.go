package soak

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb"
	"github.com/reclaim-registry/reclaim/storage/tracker"
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
	addr := os.Getenv("RECLAIM_TEST_REDIS_ADDR")
	redisKind := "redis-server"
	if addr == "" {
		addr, redisKind = miniredis.RunT(t).Addr(), "miniredis"
	}
	prefix := randomPrefix()
	t.Cleanup(func() { cleanupRedis(addr, prefix) })
	root, raw := prepareStorage(t)
	ctx := context.Background()

	var orphans, linked []digest.Digest
	links := linkdb.NewReverseLinks(raw)
	var bytes int64
	for i := range 2 * n {
		content := []byte(fmt.Sprintf("throughput blob %d %s", i, prefix))
		d := digest.FromBytes(content)
		if err := raw.PutContent(ctx, layout.BlobDataPath(d), content); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			orphans = append(orphans, d)
			bytes += int64(len(content))
			continue
		}
		if err := links.Put(ctx, d, layout.RepoLink{Repo: "bench/app", Kind: layout.LinkLayer}); err != nil {
			t.Fatal(err)
		}
		linked = append(linked, d)
	}
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	// The tracker has recorded for longer than W: the reclaimer may delete.
	rc.Set(ctx, prefix+"since", strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10), 0)
	q := tracker.NewQueue(rc, prefix, 0)
	if err := q.Enqueue(ctx, 0, append(orphans, linked...)...); err != nil {
		t.Fatal(err)
	}

	opts := middlewareOptions(addr, prefix)
	opts["reclaimer"] = map[string]any{"enabled": true, "interval": "50ms", "batch": 200, "workers": 4, "lease": "30s"}
	p := registrytest.StartProcess(t, registrytest.WithRootDirectory(root),
		registrytest.WithStorageMiddleware("reclaim", opts), quiet)
	start := time.Now()
	deadline := start.Add(5 * time.Minute)
	var st gcStatus
	for {
		var err error
		st, err = status(ctx, p.Registry)
		if err == nil && st.Reclaimer.Reviewed >= int64(2*n) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reclaimer did not review %d blobs in 5 minutes: %+v (%v)", 2*n, st.Reclaimer, err)
		}
		time.Sleep(20 * time.Millisecond)
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
