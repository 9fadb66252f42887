package linkdb

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
)

// BenchmarkFSWriterFloor measures what a first rebuild cannot go below
// on this filesystem: the filesystem writer alone writing one new reverse
// link per blob (the blob's data directory there, _repositories, the
// repository's two levels and the kind to create, as in a first rebuild),
// from 8 goroutines, then the barrier. No walk, no read, no listing: its
// links/s is the ceiling BenchmarkRebuild's fresh rate is judged against,
// and cpu-µs/link how much of that is the kernel's (issue 29, item 3).
// One op is one link. Run it where the rebuild runs (TMPDIR):
//
//	TMPDIR=/mnt/ext4/tmp go test -run '^$' -bench FSWriterFloor -benchtime 100000x ./storage/linkdb
func BenchmarkFSWriterFloor(b *testing.B) {
	ctx := context.Background()
	root := b.TempDir()
	blobs := make([]digest.Digest, b.N)
	for i := range blobs {
		blobs[i] = digest.FromString(strconv.Itoa(i))
		if err := os.MkdirAll(root+layout.BlobDir(blobs[i]), 0o777); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(root+layout.BlobDataPath(blobs[i]), []byte("x"), 0o666); err != nil {
			b.Fatal(err)
		}
	}
	w, err := newFSWriter(root)
	if err != nil {
		b.Fatal(err)
	}
	defer w.close()
	if err := w.barrier(ctx); err != nil { // the setup's writes are not the writer's
		b.Fatal(err)
	}
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	cpu := cpuTime()
	b.ResetTimer()
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(b.N); i = next.Add(1) - 1 {
				repo := fmt.Sprintf("team%d/app%d", i%7, i%1400)
				if err := w.put(ctx, layout.ReverseLinkPath(blobs[i], repo, reclaim.LinkLayer), []byte(repo+"\n")); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := w.barrier(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
	used := cpuTime() - cpu
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "links/s")
	b.ReportMetric(float64(used.Microseconds())/float64(b.N), "cpu-µs/link")
}
