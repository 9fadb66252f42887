package deletionevents

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
)

// BenchmarkDeleted measures what a run pays to hand over its deletions:
// Deleted for a run of 100 deleted objects, to two endpoints. The posts
// happen later, on the endpoints' goroutines: ns/deletion is the
// hand-over alone, the only cost a run carries (after its last delete).
func BenchmarkDeleted(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer srv.Close()
	s := New(parse(b, endpointYAML("a", srv.URL, "")+endpointYAML("b", srv.URL, "")))
	d := reclaim.Deletions{Source: "gc", RunID: "r", Instance: "i"}
	for i := range 100 {
		d.Objects = append(d.Objects, reclaim.Deletion{Kind: reclaim.KindBlob, Repository: "team/app", Digest: digest.FromString(string(rune(i))), Size: 1024, Reason: "unreferenced"})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Deleted(b.Context(), d)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(d.Objects)), "ns/deletion")
}
