package registry_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim/gcrun"
	"github.com/reclaim-registry/reclaim/registry/registrytest"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// BenchmarkConsoleOverviewRecentRuns renders the console's overview on a
// registry whose Redis holds 50 finished runs of other instances (each
// report lists 100 deleted blobs): what reading the shared recent runs
// costs a page.
//
//	RECLAIM_TEST_REDIS_ADDR=127.0.0.1:6379 go test -run XXX -bench ConsoleOverviewRecentRuns -benchtime 200x ./registry
func BenchmarkConsoleOverviewRecentRuns(b *testing.B) {
	addr := storagetest.RealRedis()
	if addr == "" {
		b.Skipf("needs a real Redis: set %s=host:port", storagetest.RedisAddrEnv)
	}
	r := registrytest.Start(b, registrytest.WithStorageMiddleware("reclaim", map[string]any{
		"window": "1s", "dedup": "10ms", "gc": map[string]any{"enabled": true}, "reclaimer": map[string]any{"enabled": false},
		"redis": map[string]any{"addrs": []any{addr}}, "prefix": storagetest.RealPrefix(b, addr)}))
	tr := r.Server.Env().Tracker
	ctx := b.Context()
	for i := range 50 {
		repo, id := fmt.Sprintf("bench/r%02d", i), fmt.Sprintf("benchrun%02d", i)
		rep := &collector.Report{RunID: id, Repository: repo, Status: gcrun.StatusDone, StartedAt: time.Now(), FinishedAt: time.Now(), BytesFreed: 1 << 20}
		for j := range 100 {
			rep.BlobsDeleted = append(rep.BlobsDeleted, digest.FromString(fmt.Sprint(i, j)))
		}
		body, err := json.Marshal(rep)
		if err != nil {
			b.Fatal(err)
		}
		l, err := tr.BeginRun(ctx, repo, id, rep.StartedAt, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		err = l.End(ctx, gcrun.StatusDone, body)
		l.Unlock()
		if err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		resp := r.Do(b, http.MethodGet, "/gc/console/", nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("overview: %d", resp.StatusCode)
		}
	}
}
