// Command linkdbgen fills a registry storage with a synthetic registry for
// measuring `registry linkdb rebuild` and `verify`:
//
//	go run ./storage/linkdb/internal/gen/linkdbgen -config bench.yml -repos 1000 -images 10 -layers 9
//
// The storage driver comes from the config file, as for `registry serve`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/s3-aws"

	"github.com/reclaim-registry/reclaim/storage/linkdb/internal/gen"
)

func main() {
	var s gen.Spec
	config := flag.String("config", "", "registry config.yml (storage section is used)")
	flag.IntVar(&s.Repos, "repos", 100, "repositories")
	flag.IntVar(&s.Images, "images", 10, "manifests per repository")
	flag.IntVar(&s.LayersPerImage, "layers", 9, "layers per manifest")
	flag.IntVar(&s.SharedLayers, "shared", 3, "layers per manifest taken from a pool shared by all repositories")
	flag.IntVar(&s.ReferrerEvery, "referrer-every", 5, "every n-th manifest gets a referrer (0: none)")
	flag.BoolVar(&s.Reverse, "reverse", false, "also write reverse links (a registry that always ran the middleware)")
	flag.IntVar(&s.Workers, "workers", 8, "parallel writers")
	flag.StringVar(&s.Seed, "seed", "", "seed, to make distinct registries")
	flag.Parse()
	if err := run(*config, s); err != nil {
		fmt.Fprintln(os.Stderr, "linkdbgen:", err)
		os.Exit(1)
	}
}

func run(config string, s gen.Spec) error {
	f, err := os.Open(config)
	if err != nil {
		return err
	}
	defer f.Close()
	cfg, err := configuration.Parse(f)
	if err != nil {
		return err
	}
	ctx := context.Background()
	d, err := factory.Create(ctx, cfg.Storage.Type(), cfg.Storage.Parameters())
	if err != nil {
		return err
	}
	start := time.Now()
	st, err := gen.Generate(ctx, d, s)
	if err != nil {
		return err
	}
	el := time.Since(start)
	fmt.Printf("wrote %d blobs, %d layer links, %d revision links (%d forward links), %d reverse links, %d referrers in %s\n",
		st.Blobs, st.LayerLinks, st.RevisionLinks, st.Links(), st.ReverseLinks, st.Referrers, el.Round(time.Millisecond))
	return nil
}
