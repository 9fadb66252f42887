package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/reclaim-registry/reclaim/gc/collector"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/redisstate/usage"
	"github.com/reclaim-registry/reclaim/registry/console"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// BenchmarkConsoleRanked10k renders the overview (its Reclaimable card:
// the top 5) and the repositories page (the top 100, with a page of the
// catalog) with 10,000 repositories ranked in Redis (the real one of
// RECLAIM_TEST_REDIS_ADDR when set, else miniredis). Neither page reads
// more than it shows, so neither grows with the registry:
//
//	go test -run XXX -bench ConsoleRanked10k -benchtime 200x ./registry/console
func BenchmarkConsoleRanked10k(b *testing.B) {
	const repos = 10000
	addr, prefix := storagetest.RealOrMini(b)
	c := storagetest.NewClient(addr)
	b.Cleanup(func() { c.Close() })
	store := usage.New(c, prefix)
	ctx := context.Background()
	names := make([]string, repos)
	for i := range repos {
		names[i] = fmt.Sprintf("org%02d/repo%05d", i%50, i)
		u := reclaim.Usage{Repository: names[i], ReclaimableBytes: int64(i * 7919 % 1000003), ExclusiveBytes: int64(i * 104729 % 10000019),
			Blobs: 12, ExclusiveBlobs: 9, SharedBlobs: 3, Manifests: 4, ComputedAt: time.Now().Add(-time.Duration(i) * time.Second),
			LinkDBComplete: true, Blockers: []reclaim.AbortReason{}}
		if err := store.PutUsage(ctx, u, false); err != nil {
			b.Fatal(err)
		}
	}
	h := console.New(console.Config{
		Authorize: func(*http.Request, string, console.Access) error { return nil },
		Deny: func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, err.Error(), http.StatusForbidden)
		},
		Overview:     func(context.Context) console.Overview { return console.Overview{GCEnabled: true, WindowSeconds: 86400} },
		Runs:         func(context.Context) ([]*collector.Report, error) { return nil, nil },
		Run:          func(context.Context, string) (*collector.Report, bool, error) { return nil, false, nil },
		Repositories: func(_ context.Context, _ string, n int) ([]string, error) { return names[:min(n, len(names))], nil },
		Validate:     func(string) error { return nil },
		Preview:      func(context.Context, string) (*collector.Report, error) { return nil, nil },
		Ranked:       store.Top,
	}, http.NotFoundHandler())
	for _, page := range []struct{ name, path, want string }{
		{"overview", console.Prefix, "of 10000 ranked repositories"},
		{"repositories", console.Prefix + "repositories", "The top 100 of 10000 repositories"},
		{"repositories-exclusive", console.Prefix + "repositories?by=exclusive", "Ranked by exclusive bytes"},
	} {
		b.Run(page.name, func(b *testing.B) {
			var size int
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, page.path, nil))
				if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), page.want) {
					b.Fatalf("GET %s: %d\n%s", page.path, w.Code, w.Body.String())
				}
				size = w.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/page")
		})
	}
}
