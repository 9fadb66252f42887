package layout

import (
	"context"
	"errors"
	"path"
	"reflect"
	"strings"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	"github.com/reclaim-registry/reclaim/reclaim"
)

// failingList fails List of chosen directories; its Walk lists one
// directory at a time through it, as the filesystem driver's does.
type failingList struct {
	storagedriver.StorageDriver
	fail func(dir string) bool
}

var errDenied = errors.New("permission denied")

func (f failingList) List(ctx context.Context, p string) ([]string, error) {
	if f.fail(p) {
		return nil, errDenied
	}
	return f.StorageDriver.List(ctx, p)
}

func (f failingList) Walk(ctx context.Context, p string, fn storagedriver.WalkFn, opts ...func(*storagedriver.WalkOptions)) error {
	return storagedriver.WalkFallback(ctx, f, p, fn, opts...)
}

func put(t *testing.T, d storagedriver.StorageDriver, files map[string]string) {
	t.Helper()
	for p, c := range files {
		if err := d.PutContent(context.Background(), p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
}

// walkAll walks every shard and returns what the visitor saw, one line per
// callback, and the shards whose walk failed.
func walkAll(t *testing.T, d storagedriver.StorageDriver) (seen []string, failed []string) {
	t.Helper()
	ctx := context.Background()
	shards, err := Shards(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	v := ShardVisitor{
		Reverse: func(b *Blob, fi storagedriver.FileInfo, p Path) {
			seen = append(seen, "reverse "+p.Repo+" "+string(p.LinkKind)+" "+b.Digest.Encoded()[:4])
		},
		Blob: func(b *Blob) {
			line := "blob " + b.Digest.Encoded()[:4]
			if b.HasData {
				line += " data"
			}
			if b.Unreadable != "" {
				line += " unreadable"
			}
			seen = append(seen, line+" "+strings.Repeat("r", b.Reverse))
		},
	}
	for _, s := range shards {
		if err := WalkShard(ctx, d, s, v); err != nil {
			failed = append(failed, s)
		}
	}
	return seen, failed
}

// blobIn returns a digest whose shard is the one of hex prefix p.
func blobIn(p string, fill byte) digest.Digest {
	return digest.NewDigestFromEncoded(digest.SHA256, p+strings.Repeat(string(fill), 64-len(p)))
}

func TestWalkShardGroupsByBlob(t *testing.T) {
	a, b, c := blobIn("aa", '1'), blobIn("aa", '2'), blobIn("bb", '3')
	mem := inmemory.New()
	put(t, mem, map[string]string{
		BlobDataPath(a): "data of a",
		ReverseLinkPath(a, "app", reclaim.LinkLayer):       a.String(),
		ReverseLinkPath(a, "team/x", reclaim.LinkManifest): a.String(),
		ReverseLinkPath(b, "app", reclaim.LinkLayer):       b.String(), // no data
		BlobDataPath(c): "c",
		// Not Reclaim's or Distribution's: ignored, the blob still counted.
		ReverseLinksDir(c) + "/app/_other/link": "x",
		BlobsRoot + "/sha256/bb/nothex/data":    "x",
	})
	seen, failed := walkAll(t, mem)
	want := []string{
		"reverse app _layers " + a.Encoded()[:4],
		"reverse team/x _manifests " + a.Encoded()[:4],
		"blob aa11 data rr",
		"reverse app _layers " + b.Encoded()[:4],
		"blob aa22 r",
		"blob bb33 data ",
	}
	if !reflect.DeepEqual(seen, want) || failed != nil {
		t.Fatalf("saw %q (failed %v), want %q", seen, failed, want)
	}
}

func TestWalkShardIsolatesAnUnreadableDirectory(t *testing.T) {
	a, b, c := blobIn("aa", '1'), blobIn("aa", '2'), blobIn("bb", '3')
	mem := inmemory.New()
	put(t, mem, map[string]string{
		BlobDataPath(a): "a",
		ReverseLinkPath(a, "x", reclaim.LinkLayer): a.String(),
		ReverseLinkPath(a, "y", reclaim.LinkLayer): a.String(),
		BlobDataPath(b): "b",
		BlobDataPath(c): "c",
		ReverseLinkPath(c, "x", reclaim.LinkLayer):   c.String(),
		ReverseLinkPath(c, "app", reclaim.LinkLayer): c.String(),
	})
	unreadable := path.Dir(ReverseLinkPath(a, "y", reclaim.LinkLayer))
	d := failingList{StorageDriver: mem, fail: func(dir string) bool {
		return dir == unreadable || dir == path.Dir(BlobDir(c))
	}}
	seen, failed := walkAll(t, d)
	// a's x link is delivered once although the walk is redone past it; b
	// is walked; the shard of c cannot be listed at all.
	want := []string{
		"reverse x _layers " + a.Encoded()[:4],
		"blob aa11 data unreadable r",
		"blob aa22 data ",
	}
	if !reflect.DeepEqual(seen, want) || !reflect.DeepEqual(failed, []string{path.Dir(BlobDir(c))}) {
		t.Fatalf("saw %q, failed %v; want %q, failed [the bb shard]", seen, failed, want)
	}
}

func TestShardsOfAnEmptyStore(t *testing.T) {
	shards, err := Shards(context.Background(), inmemory.New())
	if err != nil || shards != nil {
		t.Fatalf("Shards = %v, %v", shards, err)
	}
}
