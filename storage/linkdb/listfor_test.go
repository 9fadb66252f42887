package linkdb

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// sharedBlob writes a blob linked by repo (both kinds) and by n others.
func sharedBlob(t *testing.T, n int, repo string) (*storagetest.WalkCounter, *ReverseLinks, digest.Digest) {
	t.Helper()
	ctx := context.Background()
	d := &storagetest.WalkCounter{StorageDriver: inmemory.New()}
	rl := NewReverseLinks(d)
	b := digest.FromString("shared base layer")
	links := []layout.RepoLink{{Repo: repo, Kind: layout.LinkLayer}, {Repo: repo, Kind: layout.LinkManifest}}
	for i := range n {
		links = append(links, layout.RepoLink{Repo: fmt.Sprintf("team/r%04d", i), Kind: layout.LinkLayer})
	}
	for _, l := range links {
		if err := rl.Put(ctx, b, l); err != nil {
			t.Fatal(err)
		}
	}
	return d, rl, b
}

// ListFor answers "who besides repo links this blob?" by stopping at the
// first other repository: the Stats it makes do not grow with the number
// of repositories linking the blob, where List's do.
func TestListForStopsAtTheFirstOtherRepository(t *testing.T) {
	ctx := context.Background()
	var statsFor, statsList []int64
	for _, n := range []int{10, 300} {
		d, rl, b := sharedBlob(t, n, "app")
		got, err := rl.ListFor(ctx, b, "app")
		if err != nil {
			t.Fatal(err)
		}
		want := []layout.RepoLink{{Repo: "app", Kind: layout.LinkLayer}, {Repo: "app", Kind: layout.LinkManifest}, {Repo: "team/r0000", Kind: layout.LinkLayer}}
		if !slices.Equal(got, want) {
			t.Fatalf("n=%d: ListFor = %v, want %v", n, got, want)
		}
		t.Logf("n=%d ListFor: %d stats, %d lists, %d names listed", n, d.Stats.Load(), d.Lists.Load(), d.Names.Load())
		statsFor = append(statsFor, d.Stats.Load())
		d.Stats.Store(0)
		all, err := rl.List(ctx, b)
		if err != nil || len(all) != n+2 {
			t.Fatalf("n=%d: List = %d links (%v), want %d", n, len(all), err, n+2)
		}
		statsList = append(statsList, d.Stats.Load())
	}
	if statsFor[0] != statsFor[1] {
		t.Errorf("ListFor's stats grew with the repositories linking the blob: %v", statsFor)
	}
	if statsList[1] <= statsList[0] {
		t.Errorf("List's stats did not grow (%v): the measurement does not see below Walk", statsList)
	}
}

// ListFor keeps every decision List makes: whether a repository other
// than repo links the blob, and, when none does, every link of repo.
func TestListForDecidesAsList(t *testing.T) {
	ctx := context.Background()
	d := &storagetest.WalkCounter{StorageDriver: inmemory.New()}
	rl := NewReverseLinks(d)
	sets := [][]layout.RepoLink{
		nil,
		{{Repo: "app", Kind: layout.LinkLayer}},
		{{Repo: "app", Kind: layout.LinkLayer}, {Repo: "app", Kind: layout.LinkManifest}},
		{{Repo: "zz/last", Kind: layout.LinkManifest}},
		{{Repo: "a", Kind: layout.LinkLayer}, {Repo: "app", Kind: layout.LinkManifest}, {Repo: "app/sub", Kind: layout.LinkLayer}},
		{{Repo: "app/sub", Kind: layout.LinkLayer}, {Repo: "apps", Kind: layout.LinkLayer}},
	}
	for i, set := range sets {
		b := digest.FromString(fmt.Sprint("blob ", i))
		for _, l := range set {
			if err := rl.Put(ctx, b, l); err != nil {
				t.Fatal(err)
			}
		}
		all, err := rl.List(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		for _, repo := range []string{"app", "", "zz/last", "nobody"} {
			some, err := rl.ListFor(ctx, b, repo)
			if err != nil {
				t.Fatal(err)
			}
			if others(some, repo) != others(all, repo) || !others(all, repo) && !slices.Equal(some, all) {
				t.Errorf("set %d, repo %q: ListFor %v, List %v", i, repo, some, all)
			}
		}
	}
}

func others(ls []layout.RepoLink, repo string) bool {
	return slices.ContainsFunc(ls, func(l layout.RepoLink) bool { return l.Repo != repo })
}
