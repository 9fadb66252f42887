package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	distregistry "github.com/distribution/distribution/v3/registry"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"
	"github.com/spf13/cobra"

	"github.com/reclaim-registry/reclaim/retention/inuse"
)

// inuseScan is `registry inuse scan`: the flags and what the scan found.
type inuseScan struct {
	gcClientFlags
	registries   []string
	source       string
	allowMissing bool
	maxFileSize  byteSize
}

func newInUseCommand() *cobra.Command {
	root := &cobra.Command{Use: "inuse", Short: "The in-use index: which exact images run where (docs/api.md)"}
	root.AddCommand(newInUseScanCommand())
	return root
}

func newInUseScanCommand() *cobra.Command {
	var s inuseScan
	cmd := clientCommand(&s.gcClientFlags, &cobra.Command{
		Use:   "scan <dir-or-file|->...",
		Short: "Find the images Kubernetes YAML runs, resolve their tags to digests, print or upload them",
		Long: "Reads Kubernetes YAML (Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs, Pods,\n" +
			"List kinds, multi-document files, Helm output, Kustomize directories with images: overrides),\n" +
			"keeps the references to this registry (--registry), resolves tags to digests against --url,\n" +
			"and prints the images, or with --source uploads them as that source's whole set.\n" +
			"A file that does not parse, a kustomization cycle, a file that is not a regular file or is larger\n" +
			"than --max-file-size (so is standard input) fails the scan (exit 2) and uploads nothing.",
		Example: "  helm template web ./chart | registry inuse scan - --registry registry.example.com\n" +
			"  registry inuse scan deploy/overlays/prod --registry registry.example.com --source prod-eu --url https://registry.example.com",
		Args: cobra.MinimumNArgs(1),
		RunE: s.run,
	})
	cmd.Flags().StringArrayVar(&s.registries, "registry", nil, "host[:port] under which clusters pull from this registry (repeatable; default: the host of --url)")
	cmd.Flags().StringVar(&s.source, "source", "", "upload the images as this in-use source (replacing what it declared)")
	cmd.Flags().BoolVar(&s.allowMissing, "allow-missing", false, "skip (and report) tags the registry does not have, instead of failing")
	s.maxFileSize = inuse.DefaultMaxFileSize
	cmd.Flags().Var(&s.maxFileSize, "max-file-size", "the most bytes read from one file or from standard input (bytes, or with KiB, MiB, GiB)")
	return cmd
}

func (s *inuseScan) run(cmd *cobra.Command, args []string) error {
	var found []inuse.Found
	for _, a := range args {
		f, err := scanArg(cmd, a, inuse.Limits{MaxFileSize: int64(s.maxFileSize)})
		if errors.Is(err, inuse.ErrTooLarge) {
			err = fmt.Errorf("%w (raise it with --max-file-size)", err)
		}
		if err != nil {
			return &exitError{exitRejected, err}
		}
		found = append(found, f...)
	}
	base, err := url.Parse(strings.TrimSuffix(s.url, "/"))
	if err != nil || base.Host == "" {
		return &exitError{exitFailure, fmt.Errorf("--url %q: want http(s)://host[:port]", s.url)}
	}
	ours := map[string]bool{base.Host: len(s.registries) == 0}
	for _, r := range s.registries {
		ours[r] = true
	}
	images, err := s.resolve(cmd, base, ours, found)
	if err != nil {
		return err
	}
	if s.source == "" {
		return s.print(cmd, images)
	}
	body, err := json.Marshal(map[string]any{"images": images})
	if err != nil {
		return err
	}
	out, err := s.send(cmd, http.MethodPut, "inuse/sources/"+url.PathEscape(s.source), nil, body)
	if err != nil {
		return err
	}
	if s.json {
		_, err = cmd.OutOrStdout().Write(out)
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "source %s: %d images uploaded\n", s.source, len(images))
	return nil
}

// scanArg scans one argument; "-" is standard input, one YAML stream.
func scanArg(cmd *cobra.Command, a string, l inuse.Limits) ([]inuse.Found, error) {
	if a != "-" {
		return inuse.Scan(a, l)
	}
	return inuse.ScanReader("<stdin>", cmd.InOrStdin(), l)
}

// resolve keeps the references to this registry and resolves their tags;
// a reference with a digest is taken as is.
func (s *inuseScan) resolve(cmd *cobra.Command, base *url.URL, ours map[string]bool, found []inuse.Found) ([]inuse.Image, error) {
	images := []inuse.Image{}
	var missing, other []string
	for _, f := range found {
		ref, err := inuse.ParseImage(f.Image)
		if err != nil {
			return nil, &exitError{exitRejected, fmt.Errorf("%s %s %s: %w", f.Where, f.Object, f.Field, err)}
		}
		if !ours[ref.Host] {
			other = append(other, f.Image)
			continue
		}
		d := ref.Digest
		if d == "" {
			d, err = s.head(cmd, base, ref)
			if errors.Is(err, errTagUnknown) && s.allowMissing {
				missing = append(missing, f.Image+" ("+f.Where+")")
				continue
			}
			if err != nil {
				return nil, &exitError{exitFailure, fmt.Errorf("%s %s: resolve %s: %w", f.Where, f.Object, f.Image, err)}
			}
		}
		images = append(images, inuse.Image{Repository: ref.Path, Digest: d})
	}
	w := cmd.ErrOrStderr()
	for _, m := range missing {
		fmt.Fprintf(w, "warning: not in the registry, skipped: %s\n", m)
	}
	if len(other) > 0 {
		fmt.Fprintf(w, "%d references to other registries skipped\n", len(other))
		if s.verbose {
			for _, o := range other {
				fmt.Fprintf(w, "  %s\n", o)
			}
		}
	}
	return inuse.SortImages(images), nil
}

var errTagUnknown = errors.New("tag not in the registry")

// head resolves a tag to its manifest digest with a HEAD against base.
func (s *inuseScan) head(cmd *cobra.Command, base *url.URL, ref inuse.ImageRef) (digest.Digest, error) {
	var opts []name.Option
	if base.Scheme == "http" {
		opts = append(opts, name.Insecure)
	}
	tag, err := name.NewTag(base.Host+"/"+ref.Path+":"+ref.Tag, opts...)
	if err != nil {
		return "", err
	}
	var a authn.Authenticator = authn.Anonymous
	switch {
	case s.token != "":
		a = &authn.Bearer{Token: s.token}
	case s.user != "":
		user, pass, ok := strings.Cut(s.user, ":")
		if !ok {
			pass = os.Getenv("RECLAIM_PASSWORD")
		}
		a = &authn.Basic{Username: user, Password: pass}
	}
	desc, err := remote.Head(tag, remote.WithAuth(a), remote.WithContext(cmd.Context()))
	var te *transport.Error
	if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
		return "", fmt.Errorf("%w: %s", errTagUnknown, tag)
	}
	if err != nil {
		return "", err
	}
	return digest.Digest(desc.Digest.String()), nil
}

func (s *inuseScan) print(cmd *cobra.Command, images []inuse.Image) error {
	out := cmd.OutOrStdout()
	if s.json {
		return json.NewEncoder(out).Encode(map[string]any{"images": images})
	}
	for _, im := range images {
		fmt.Fprintln(out, im.String())
	}
	return nil
}

// byteSize is a flag in bytes, or with a KiB, MiB or GiB suffix.
type byteSize int64

func (b *byteSize) Type() string { return "size" }

func (b *byteSize) String() string {
	for _, u := range []struct {
		suffix string
		shift  int
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n := int64(*b); n > 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(*b), 10)
}

func (b *byteSize) Set(v string) error {
	num, shift := v, 0
	for suffix, sh := range map[string]int{"KiB": 10, "MiB": 20, "GiB": 30} {
		if n, ok := strings.CutSuffix(v, suffix); ok {
			num, shift = n, sh
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64>>shift {
		return fmt.Errorf("%q: want a positive size such as 16MiB", v)
	}
	*b = byteSize(n << shift)
	return nil
}

func init() {
	distregistry.RootCmd.AddCommand(newInUseCommand())
}
