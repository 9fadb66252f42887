package linkdb

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// sharedBlob writes a blob linked by repo (both kinds) and by n others.
func sharedBlob(t *testing.T, n int, repo string) (*storagetest.WalkCounter, *ReverseLinks, digest.Digest) {
	t.Helper()
	ctx := context.Background()
	d := &storagetest.WalkCounter{StorageDriver: inmemory.New()}
	rl := NewReverseLinks(d)
	b := digest.FromString("shared base layer")
	links := []reclaim.RepoLink{{Repo: repo, Kind: reclaim.LinkLayer}, {Repo: repo, Kind: reclaim.LinkManifest}}
	for i := range n {
		links = append(links, reclaim.RepoLink{Repo: fmt.Sprintf("team/r%04d", i), Kind: reclaim.LinkLayer})
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
		want := []reclaim.RepoLink{{Repo: "app", Kind: reclaim.LinkLayer}, {Repo: "app", Kind: reclaim.LinkManifest}, {Repo: "team/r0000", Kind: reclaim.LinkLayer}}
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
	sets := [][]reclaim.RepoLink{
		nil,
		{{Repo: "app", Kind: reclaim.LinkLayer}},
		{{Repo: "app", Kind: reclaim.LinkLayer}, {Repo: "app", Kind: reclaim.LinkManifest}},
		{{Repo: "zz/last", Kind: reclaim.LinkManifest}},
		{{Repo: "a", Kind: reclaim.LinkLayer}, {Repo: "app", Kind: reclaim.LinkManifest}, {Repo: "app/sub", Kind: reclaim.LinkLayer}},
		{{Repo: "app/sub", Kind: reclaim.LinkLayer}, {Repo: "apps", Kind: reclaim.LinkLayer}},
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

func others(ls []reclaim.RepoLink, repo string) bool {
	return slices.ContainsFunc(ls, func(l reclaim.RepoLink) bool { return l.Repo != repo })
}
