package inuse

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// kustomizationFiles are the names Kustomize reads, in its order.
var kustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// kustomization is the part of a kustomization file the scanner reads.
type kustomization struct {
	Resources  []string   `json:"resources"`
	Bases      []string   `json:"bases"`
	Components []string   `json:"components"`
	Images     []Override `json:"images"`
}

// entries are the resources, bases and components, in that order.
func (k kustomization) entries() []string {
	return slices.Concat(k.Resources, k.Bases, k.Components)
}

// kustomizationIn returns the kustomization file of dir, "" when none.
func kustomizationIn(dir string) string {
	for _, n := range kustomizationFiles {
		if fi, err := os.Stat(filepath.Join(dir, n)); err == nil && fi.Mode().IsRegular() {
			return filepath.Join(dir, n)
		}
	}
	return ""
}

func (s *scanner) readKustomization(file string) (kustomization, error) {
	var k kustomization
	b, err := s.readFile(file)
	if err != nil {
		return k, err
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		return k, parseError(file, document{line: 1}, err)
	}
	return k, nil
}

// scanKustomization returns the images of the kustomization in dir: those
// of its resources (files, or directories with their own kustomization,
// recursively), bases and components, rewritten by its `images:`
// overrides. Only resources and images are applied: a patch that changes
// an image is not (render with `kustomize build` and scan the output).
// stack holds the kustomizations that led here, to name a cycle.
func (s *scanner) scanKustomization(dir string, stack []string) ([]Found, error) {
	real, err := realPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	for i, d := range stack {
		if r, _ := realPath(d); r == real {
			return nil, fmt.Errorf("%w: kustomization cycle: %s", ErrInvalid, strings.Join(slices.Concat(stack[i:], []string{dir}), " -> "))
		}
	}
	s.visited[real] = true
	stack = append(slices.Clip(stack), dir)
	file := kustomizationIn(dir)
	k, err := s.readKustomization(file)
	if err != nil {
		return nil, err
	}
	var out []Found
	for _, res := range k.entries() {
		found, err := s.scanResource(file, real, res, stack)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	for i, f := range out {
		for _, o := range k.Images {
			if img, ok := o.Apply(f.Image); ok {
				out[i].Image = img
				break
			}
		}
	}
	return out, nil
}

// scanResource scans one entry of the kustomization file whose directory
// is root (a real path). As Kustomize's default load restrictor
// (LoadRestrictionsRootOnly) demands, a file must be in or under root once
// its symlinks are resolved; a directory is another kustomization and may
// be anywhere but root or above it (`../../base`).
func (s *scanner) scanResource(file, root, res string, stack []string) ([]Found, error) {
	if strings.Contains(res, "://") || strings.HasPrefix(res, "github.com/") || strings.HasPrefix(res, "git@") {
		return nil, fmt.Errorf("%w: %s: remote resource %q: render with `kustomize build` and scan its output", ErrInvalid, file, res)
	}
	if filepath.IsAbs(res) {
		return nil, fmt.Errorf("%w: %s: resource %q is an absolute path: write it relative to the kustomization", ErrInvalid, file, res)
	}
	p := filepath.Join(filepath.Dir(file), res)
	real, err := realPath(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: resource %q: %v", ErrInvalid, file, res, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: resource %q: %v", ErrInvalid, file, res, err)
	}
	if fi.IsDir() {
		if kustomizationIn(p) == "" {
			return nil, fmt.Errorf("%w: %s: resource %q is a directory without a kustomization", ErrInvalid, file, res)
		}
		if within(root, real) {
			return nil, fmt.Errorf("%w: kustomization cycle: %s lists %q, its own directory or one above it", ErrInvalid, file, res)
		}
		return s.scanKustomization(p, stack)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s: resource %q: %s, not a regular file", ErrInvalid, file, res, modeName(fi.Mode()))
	}
	if !within(real, root) {
		return nil, fmt.Errorf("%w: %s: resource %q is outside %s: Kustomize's default load restrictor refuses a file out of the kustomization's directory (list a directory with its own kustomization instead)",
			ErrInvalid, file, res, root)
	}
	return s.scanFile(p)
}
