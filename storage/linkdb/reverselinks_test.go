package linkdb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

func fsDriver(t testing.TB) (*filesystem.Driver, string) {
	t.Helper()
	root := t.TempDir()
	return filesystem.New(filesystem.DriverParameters{RootDirectory: root, MaxThreads: 10}), root
}

// TestReverseLinksListCountsWhatIsNotAFile: anything at a reverse link path
// is listed, never skipped. A file counts whatever it holds; a directory and
// a dangling symlink (which the filesystem driver's Walk leaves out) come
// with a Problem.
func TestReverseLinksListCountsWhatIsNotAFile(t *testing.T) {
	ctx := context.Background()
	d, root := fsDriver(t)
	rl := NewReverseLinks(d)
	b := digest.FromString("blob")
	file := func(p string) string { return filepath.Join(root, filepath.FromSlash(p)) }
	if err := rl.Put(ctx, b, reclaim.RepoLink{Repo: "good", Kind: reclaim.LinkLayer}); err != nil {
		t.Fatal(err)
	}
	if err := d.PutContent(ctx, layout.ReverseLinkPath(b, "team/garbage", reclaim.LinkManifest), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(file(layout.ReverseLinkPath(b, "dir", reclaim.LinkLayer)), 0o755); err != nil {
		t.Fatal(err)
	}
	dangling := file(layout.ReverseLinkPath(b, "dangling", reclaim.LinkLayer))
	if err := os.MkdirAll(filepath.Dir(dangling), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	// A kind directory holding only a write in flight is not a link.
	inflight := file(layout.ReverseLinkPath(b, "inflight", reclaim.LinkLayer))
	if err := os.MkdirAll(filepath.Dir(inflight), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inflight+".x.tmp", nil, 0o644); err != nil {
		t.Fatal(err)
	}

	links, err := rl.List(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range links {
		got[l.Repo+" "+string(l.Kind)] = l.Problem
	}
	want := map[string]string{
		"dangling _layers":        "dangling",
		"dir _layers":             "directory",
		"good _layers":            "",
		"team/garbage _manifests": "",
	}
	if len(got) != len(want) {
		t.Fatalf("links %v, want %v", got, want)
	}
	for k, w := range want {
		p, ok := got[k]
		if !ok || (w == "") != (p == "") || !strings.Contains(p, w) {
			t.Errorf("%s: problem %q (listed %v), want one mentioning %q", k, p, ok, w)
		}
	}

	for repo, want := range map[string]error{"good": nil, "team/garbage": ErrMalformedLink, "dir": ErrMalformedLink} {
		kind := reclaim.LinkLayer
		if repo == "team/garbage" {
			kind = reclaim.LinkManifest
		}
		has, err := rl.Has(ctx, b, reclaim.RepoLink{Repo: repo, Kind: kind})
		if !errors.Is(err, want) || has != (want == nil) {
			t.Errorf("Has(%s): %v %v, want error %v", repo, has, err, want)
		}
	}
	if has, err := rl.Has(ctx, b, reclaim.RepoLink{Repo: "absent", Kind: reclaim.LinkLayer}); has || err != nil {
		t.Errorf("Has(absent): %v %v", has, err)
	}
}

// TestReverseLinksListIgnoresALinkDeletedDuringTheLook: a link the walk did
// not see, that the listing names and that is deleted before the stat, was
// deleted, not dangling: the second listing tells.
func TestReverseLinksListIgnoresALinkDeletedDuringTheLook(t *testing.T) {
	ctx := context.Background()
	fs, root := fsDriver(t)
	b := digest.FromString("blob")
	p := layout.ReverseLinkPath(b, "r", reclaim.LinkLayer)
	full := filepath.Join(root, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	// Invisible to the walk, named by the listing.
	if err := os.Symlink(filepath.Join(root, "nowhere"), full); err != nil {
		t.Fatal(err)
	}
	d := &storagetest.HookDriver{StorageDriver: fs, Before: func(_ context.Context, method, path string) error {
		if method == "Stat" && path == p {
			return os.Remove(full) // the link is deleted between listing and stat
		}
		return nil
	}}
	links, err := NewReverseLinks(d).List(ctx, b)
	if err != nil || len(links) != 0 {
		t.Fatalf("links %+v, %v; want none", links, err)
	}
}

// TestReverseLinksEnsure: Ensure writes only what is not a well-formed
// link already, and never takes a failed read for one.
func TestReverseLinksEnsure(t *testing.T) {
	ctx := context.Background()
	fs, root := fsDriver(t)
	b := digest.FromString("blob")
	at := func(repo string) string { return layout.ReverseLinkPath(b, repo, reclaim.LinkLayer) }
	if err := fs.PutContent(ctx, at("good"), []byte(b)); err != nil {
		t.Fatal(err)
	}
	if err := fs.PutContent(ctx, at("bad"), []byte("garbage")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.FromSlash(at("dir"))), 0o755); err != nil {
		t.Fatal(err)
	}
	d := storagetest.NewCountingDriver(&storagetest.HookDriver{StorageDriver: fs, Before: func(_ context.Context, method, p string) error {
		if method == "GetContent" && p == at("unreadable") {
			return errors.New("read failed")
		}
		return nil
	}})
	rl := NewReverseLinks(d)
	for _, tc := range []struct {
		repo  string
		found LinkState
		wrote bool
		err   error
	}{
		{repo: "good", found: LinkPresent},
		{repo: "absent", found: LinkMissing, wrote: true},
		{repo: "bad", found: LinkBadContent, wrote: true},
		{repo: "unreadable", found: LinkUnreadable, wrote: true},
		{repo: "dir", found: LinkDirectory, err: ErrMalformedLink},
	} {
		t.Run(tc.repo, func(t *testing.T) {
			before := d.Counts()["PutContent"]
			found, err := rl.Ensure(ctx, b, reclaim.RepoLink{Repo: tc.repo, Kind: reclaim.LinkLayer})
			wrote := d.Counts()["PutContent"] > before
			if found != tc.found || wrote != tc.wrote || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("Ensure: found %v, wrote %v, %v; want %v, %v, %v", found, wrote, err, tc.found, tc.wrote, tc.err)
			}
			if tc.err != nil {
				return
			}
			if got, err := fs.GetContent(ctx, at(tc.repo)); err != nil || !WellFormedLink(got, b) {
				t.Errorf("after Ensure: %q, %v", got, err)
			}
		})
	}
}

// BenchmarkReverseLinkWrite: what a reverse-link write costs on the
// filesystem driver, and what Ensure costs when the link is there already
// (a re-pushed manifest, a re-uploaded layer) or is not.
//
//	go test -run '^$' -bench ReverseLinkWrite ./storage/linkdb
func BenchmarkReverseLinkWrite(b *testing.B) {
	ctx := context.Background()
	blob := digest.FromString("blob")
	for _, tc := range []struct {
		name  string
		fresh bool // a new link every time
		write func(*ReverseLinks, reclaim.RepoLink) error
	}{
		{"put/present", false, func(rl *ReverseLinks, l reclaim.RepoLink) error { return rl.Put(ctx, blob, l) }},
		{"ensure/present", false, func(rl *ReverseLinks, l reclaim.RepoLink) error { _, err := rl.Ensure(ctx, blob, l); return err }},
		{"put/missing", true, func(rl *ReverseLinks, l reclaim.RepoLink) error { return rl.Put(ctx, blob, l) }},
		{"ensure/missing", true, func(rl *ReverseLinks, l reclaim.RepoLink) error { _, err := rl.Ensure(ctx, blob, l); return err }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			d, _ := fsDriver(b)
			rl := NewReverseLinks(d)
			l := reclaim.RepoLink{Repo: "bench/app", Kind: reclaim.LinkLayer}
			if err := rl.Put(ctx, blob, l); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				if tc.fresh {
					l.Repo = fmt.Sprintf("bench/app%d", i)
				}
				if err := tc.write(rl, l); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
