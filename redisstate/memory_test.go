package redisstate

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	"github.com/redis/go-redis/v9"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate/usage"
	"github.com/reclaim-registry/reclaim/storage/storagetest/redistest"
)

// The sizing figures of docs/operations.md ("Running at scale"), in bytes
// of Redis used_memory: per access record and per blob in the review
// queue. TestMeasureRedisMemory fails when a measurement is off by more
// than a factor of two, so the docs cannot drift far from the code.
const (
	docBytesPerAccessRecord = 200
	docBytesPerQueuedBlob   = 175
	docBytesPerTombstone    = 285
	docBytesPerUsage        = 880
)

// TestMeasureRedisMemory writes access records through Tracker.TouchBlob
// (a blob's record and its repository link's, as a pull records them)
// and queues blobs for review through Queue.Enqueue, on a private
// redis-server, and reads INFO memory's used_memory before and after.
//
//	go test ./redisstate -run TestMeasureRedisMemory -v                   (100,000 records)
//	RECLAIM_MEASURE=1 go test ./redisstate -run TestMeasureRedisMemory -v (2,000,000 records)
func TestMeasureRedisMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server and writes 100,000 keys")
	}
	records, queued := 100_000, 50_000
	if os.Getenv("RECLAIM_MEASURE") != "" {
		records, queued = 2_000_000, 1_000_000
	}
	srv := redistest.StartRedisServer(t, redistest.Ephemeral())
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	tr, err := NewTracker(c, TrackerOptions{})
	if err != nil {
		t.Fatal(err)
	}

	before := usedMemory(ctx, t, c)
	touchMany(ctx, t, tr, records/2)
	afterRecords := usedMemory(ctx, t, c)
	keys := c.DBSize(ctx).Val()
	perRecord := float64(afterRecords-before) / float64(records)
	t.Logf("%d access records (%d keys): used_memory %d -> %d: %.0f bytes per record, %.0f MB per million",
		records, keys, before, afterRecords, perRecord, perRecord)

	q := NewQueue(c, "", 0)
	for i := 0; i < queued; i += 1000 {
		batch := make([]digest.Digest, 0, 1000)
		for j := i; j < i+1000 && j < queued; j++ {
			batch = append(batch, blobDigest("queued", j))
		}
		if err := q.Enqueue(ctx, time.Hour, batch...); err != nil {
			t.Fatal(err)
		}
	}
	afterQueue := usedMemory(ctx, t, c)
	perQueued := float64(afterQueue-afterRecords) / float64(queued)
	t.Logf("%d blobs queued for review: used_memory %d -> %d: %.0f bytes per queued blob, %.0f MB per million",
		queued, afterRecords, afterQueue, perQueued, perQueued)

	tombstones := queued
	markGoneMany(ctx, t, tr, tombstones)
	afterGone := usedMemory(ctx, t, c)
	perTombstone := float64(afterGone-afterQueue) / float64(tombstones)
	t.Logf("%d deletion tombstones: used_memory %d -> %d: %.0f bytes per tombstone, %.0f MB per million",
		tombstones, afterQueue, afterGone, perTombstone, perTombstone)

	repos := records / 100
	putUsageMany(ctx, t, usage.New(c, ""), repos)
	afterUsage := usedMemory(ctx, t, c)
	perUsage := float64(afterUsage-afterGone) / float64(repos)
	t.Logf("%d repositories' usage estimates: used_memory %d -> %d: %.0f bytes per repository, %.0f MB per million",
		repos, afterGone, afterUsage, perUsage, perUsage)

	for name, m := range map[string][2]float64{
		"access record":  {perRecord, docBytesPerAccessRecord},
		"queued blob":    {perQueued, docBytesPerQueuedBlob},
		"tombstone":      {perTombstone, docBytesPerTombstone},
		"usage estimate": {perUsage, docBytesPerUsage},
	} {
		if m[0] > 2*m[1] || m[0] < m[1]/2 {
			t.Errorf("%s: measured %.0f bytes, docs/operations.md says %.0f: update the docs (and the constant)", name, m[0], m[1])
		}
	}
}

// touchMany records n pulls of a distinct blob each, in n distinct
// repositories of 8: 2n access records (the blob's and its layer link's).
func touchMany(ctx context.Context, t *testing.T, tr *Tracker, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				blob := blobDigest("record", i)
				link := reclaim.Object{Blob: blob, Repo: fmt.Sprintf("team-%d/service-%d", i%97, i%13), Kind: reclaim.LinkLayer}
				if _, err := tr.TouchBlob(ctx, blob, []reclaim.Object{link}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// markGoneMany writes n deletion tombstones, one per deleted layer link of
// a distinct blob, as a collect's delete phase does.
func markGoneMany(ctx context.Context, t *testing.T, tr *Tracker, n int) {
	t.Helper()
	for i := range n {
		o := reclaim.Object{Blob: blobDigest("gone", i), Repo: fmt.Sprintf("team-%d/service-%d", i%97, i%13), Kind: reclaim.LinkLayer}
		if err := tr.MarkGone(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// putUsageMany stores a usage estimate for each of n repositories, as the
// reclaimer's refresh of every repository leaves them.
func putUsageMany(ctx context.Context, t *testing.T, s *usage.Store, n int) {
	t.Helper()
	for i := range n {
		u := reclaim.Usage{
			Repository: fmt.Sprintf("group-%d/project-%d/image", i%500, i), ReclaimableBytes: int64(i) << 20, ReclaimableBlobs: 12,
			ExclusiveBytes: int64(i) << 22, ExclusiveBlobs: 40, Blobs: 120, SharedBlobs: 30, Manifests: 25, ManifestsDeletable: 5,
			ComputedAt: time.Now(), LinkDBComplete: true, Blockers: []reclaim.AbortReason{},
		}
		if err := s.PutUsage(ctx, u, false); err != nil {
			t.Fatal(err)
		}
	}
}

func blobDigest(kind string, i int) digest.Digest {
	return digest.NewDigestFromBytes(digest.SHA256, sha256Of(kind+strconv.Itoa(i)))
}

func sha256Of(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// usedMemory is INFO memory's used_memory.
func usedMemory(ctx context.Context, t *testing.T, c *redis.Client) int64 {
	t.Helper()
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no used_memory in INFO memory:\n%s", info)
	return 0
}
