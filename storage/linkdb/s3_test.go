package linkdb

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/s3-aws"

	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/linkdb/internal/gen"
)

// versitygw serves S3 on loopback from a directory:
//
//	go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
//
// The test is skipped when it is not installed.
func versitygw(t testing.TB) storagedriver.StorageDriver {
	t.Helper()
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "reclaim"), 0o755); err != nil {
		t.Fatal(err)
	}
	return versitygwAt(t, root)
}

// versitygwAt serves directory root (bucket reclaim, created if missing)
// until the test ends.
func versitygwAt(t testing.TB, root string) storagedriver.StorageDriver {
	t.Helper()
	bin, err := exec.LookPath("versitygw")
	if err != nil {
		home, _ := os.UserHomeDir()
		if gobin := filepath.Join(home, "go", "bin", "versitygw"); fileExists(gobin) {
			bin = gobin
		} else {
			t.Skip("versitygw not installed")
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	if err := os.MkdirAll(filepath.Join(root, "reclaim"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--port", addr, "--access", "linkdbtest", "--secret", "linkdbtest-secret", "posix", root)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// No readiness signal but the port: poll it.
	poll, deadline := time.NewTicker(50*time.Millisecond), time.After(10*time.Second)
	defer poll.Stop()
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-poll.C:
		case <-deadline:
			t.Fatalf("versitygw did not listen on %s", addr)
		}
	}
	d, err := factory.Create(context.Background(), "s3aws", map[string]any{
		"accesskey": "linkdbtest", "secretkey": "linkdbtest-secret", "region": "us-east-1",
		"regionendpoint": "http://" + addr, "forcepathstyle": true, "secure": false,
		"bucket": "reclaim", "rootdirectory": "/registry",
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func TestRebuildAndVerifyOnS3(t *testing.T) {
	if testing.Short() {
		t.Skip("starts versitygw")
	}
	d := versitygw(t)
	ctx := context.Background()
	st := generate(t, d, gen.Spec{Repos: 6, Images: 2, LayersPerImage: 3, SharedLayers: 1, ReferrerEvery: 2})

	if rep := verify(t, d); rep.Counts[MissingReverse] != st.Links() {
		t.Fatalf("before rebuild: %+v, want %d missing", rep.Counts, st.Links())
	}
	res, err := Rebuild(ctx, d, RebuildOptions{Workers: 4, Checkpoint: StorageCheckpoint(d)})
	if err != nil || !res.Complete || res.ReverseAdded != st.Links() {
		t.Fatalf("rebuild: %+v %v", res, err)
	}
	if rep := verify(t, d); rep.ExitCode != ExitClean || rep.ReverseLinks != st.Links() || rep.ReferrerEntries != st.Referrers {
		t.Fatalf("after rebuild: exit %d %+v, reverse %d referrers %d", rep.ExitCode, rep.Counts, rep.ReverseLinks, rep.ReferrerEntries)
	}

	// Break it twice: a missing reverse link and a stale one.
	var layer string
	err = d.Walk(ctx, layout.LayersDir(gen.RepoName(0)), func(fi storagedriver.FileInfo) error {
		if !fi.IsDir() && layer == "" {
			layer = fi.Path()
		}
		return nil
	})
	if err != nil || layer == "" {
		t.Fatal(err)
	}
	c := layout.Classify(layer)
	if err := d.Delete(ctx, layout.ReverseLinkPath(c.Digest, c.Repo, layout.LinkLayer)); err != nil {
		t.Fatal(err)
	}
	if err := d.PutContent(ctx, layout.ReverseLinkPath(c.Digest, "elsewhere", layout.LinkLayer), []byte(c.Digest)); err != nil {
		t.Fatal(err)
	}
	rep := verify(t, d)
	if rep.Counts[MissingReverse] != 1 || rep.Counts[StaleReverse] != 1 || rep.ExitCode != ExitDataLoss {
		t.Fatalf("broken: exit %d %+v", rep.ExitCode, rep.Counts)
	}
	if _, err := Rebuild(ctx, d, RebuildOptions{Offline: true, MinAge: -1}); err != nil {
		t.Fatal(err)
	}
	if rep := verify(t, d); rep.ExitCode != ExitClean {
		t.Fatalf("repaired: exit %d %+v", rep.ExitCode, rep.Counts)
	}
}
