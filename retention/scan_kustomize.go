package retention

import (
	"fmt"
	"os"
	"path/filepath"
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

// kustomizationIn returns the kustomization file of dir, "" when none.
func kustomizationIn(dir string) string {
	for _, n := range kustomizationFiles {
		if fi, err := os.Stat(filepath.Join(dir, n)); err == nil && fi.Mode().IsRegular() {
			return filepath.Join(dir, n)
		}
	}
	return ""
}

func readKustomization(file string) (kustomization, error) {
	var k kustomization
	b, err := os.ReadFile(file)
	if err != nil {
		return k, fmt.Errorf("%w: %v", ErrInvalid, err)
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
// seen guards against cycles.
func scanKustomization(dir string, seen map[string]bool) ([]Found, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if seen[abs] {
		return nil, fmt.Errorf("%w: %s: kustomization cycle", ErrInvalid, dir)
	}
	seen[abs] = true
	defer delete(seen, abs)
	file := kustomizationIn(dir)
	k, err := readKustomization(file)
	if err != nil {
		return nil, err
	}
	var out []Found
	for _, res := range append(append(k.Resources, k.Bases...), k.Components...) {
		found, err := scanResource(file, dir, res, seen)
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

// scanResource scans one entry of a kustomization's resources.
func scanResource(file, dir, res string, seen map[string]bool) ([]Found, error) {
	if strings.Contains(res, "://") || strings.HasPrefix(res, "github.com/") || strings.HasPrefix(res, "git@") {
		return nil, fmt.Errorf("%w: %s: remote resource %q: render with `kustomize build` and scan its output", ErrInvalid, file, res)
	}
	p := filepath.Join(dir, res)
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: resource %q: %v", ErrInvalid, file, res, err)
	}
	if fi.IsDir() {
		if kustomizationIn(p) == "" {
			return nil, fmt.Errorf("%w: %s: resource %q is a directory without a kustomization", ErrInvalid, file, res)
		}
		return scanKustomization(p, seen)
	}
	return scanFile(p)
}

func scanFile(p string) ([]Found, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return ScanYAML(p, b)
}
