package linkdb

import (
	"context"
	"path"
	"sort"
	"strings"
	"sync"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"golang.org/x/sync/errgroup"

	"github.com/reclaim-registry/reclaim/storage/layout"
)

// repositories lists every repository under repositories/, sorted. A
// directory is a repository when it has a child whose name starts with "_"
// (_layers, _manifests, _uploads); a repository name component never starts
// with "_", so everything else is a path component to descend into. It uses
// List one directory level at a time, which is one delimited listing per
// level on object stores, up to workers listings at once (on an object
// store each is a round trip), and never touches link files.
//
// A directory that cannot be listed is returned in unreadable: the caller
// must treat repositories below it as unknown, not as absent.
func repositories(ctx context.Context, d storagedriver.StorageDriver, workers int) (repos []string, unreadable []Problem, err error) {
	var (
		mu sync.Mutex
		g  errgroup.Group
	)
	g.SetLimit(max(workers, 1))
	var visit func(dir string)
	visit = func(dir string) {
		if ctx.Err() != nil {
			return
		}
		children, err := d.List(ctx, dir)
		if err != nil {
			if !layout.IsNotFound(err) { // not found: empty registry, or removed while we walk
				mu.Lock()
				unreadable = append(unreadable, Problem{Kind: Unreadable, Path: dir, Detail: err.Error()})
				mu.Unlock()
			}
			return
		}
		isRepo := false
		for _, c := range children {
			base := path.Base(c)
			if strings.HasPrefix(base, "_") {
				isRepo = true
				continue
			}
			if strings.HasPrefix(base, ".") {
				continue // not a valid name component; editor or OS litter
			}
			// Bounded: a listing that finds no free worker runs here.
			if !g.TryGo(func() error { visit(c); return nil }) {
				visit(c)
			}
		}
		if isRepo && dir != layout.RepositoriesRoot {
			mu.Lock()
			repos = append(repos, strings.TrimPrefix(dir, layout.RepositoriesRoot+"/"))
			mu.Unlock()
		}
	}
	visit(layout.RepositoriesRoot)
	_ = g.Wait()
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	sort.Strings(repos)
	sort.Slice(unreadable, func(i, j int) bool { return unreadable[i].Path < unreadable[j].Path })
	return repos, unreadable, nil
}

// each runs fn on every unit (a repository, a blob shard), workers at once,
// and starts no more once ctx ends. It returns ctx's error.
func each(ctx context.Context, workers int, units []string, fn func(unit string)) error {
	g := new(errgroup.Group)
	g.SetLimit(workers)
	for _, u := range units {
		if ctx.Err() != nil {
			break
		}
		g.Go(func() error { fn(u); return nil })
	}
	_ = g.Wait() // fn reports its own failures
	return ctx.Err()
}
