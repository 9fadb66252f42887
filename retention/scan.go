package retention

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Scan returns the images named by the Kubernetes YAML at path:
//
//   - a file is one YAML stream (multi-document, List kinds, Helm output);
//   - a directory with a kustomization is that kustomization: its
//     resources, with its `images:` overrides applied;
//   - any other directory is walked: each kustomization found is scanned as
//     above unless another one found lists it (a base of an overlay), and
//     every .yaml, .yml or .json file outside all kustomizations is
//     scanned as a stream. Hidden directories (.git) are skipped.
//
// Any file that does not parse fails the scan with its name and line.
func Scan(path string) ([]Found, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !fi.IsDir() {
		return scanFile(path)
	}
	if kustomizationIn(path) != "" {
		return scanKustomization(path, map[string]bool{})
	}
	roots, files, err := walk(path)
	if err != nil {
		return nil, err
	}
	var out []Found
	for _, dir := range roots {
		found, err := scanKustomization(dir, map[string]bool{})
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	for _, f := range files {
		found, err := scanFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

// walk finds the kustomizations under root that no other one lists, and
// the YAML files outside every kustomization.
func walk(root string) (roots, files []string, err error) {
	var kdirs, all []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		if d.IsDir() {
			if p != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if kustomizationIn(p) != "" {
				kdirs = append(kdirs, p)
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			all = append(all, p)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	listed := map[string]bool{}
	for _, dir := range kdirs {
		k, err := readKustomization(kustomizationIn(dir))
		if err != nil {
			return nil, nil, err
		}
		for _, res := range append(append(k.Resources, k.Bases...), k.Components...) {
			listed[filepath.Clean(filepath.Join(dir, res))] = true
		}
	}
	for _, dir := range kdirs {
		if !listed[filepath.Clean(dir)] {
			roots = append(roots, dir)
		}
	}
	for _, f := range all {
		if !slices.ContainsFunc(kdirs, func(dir string) bool { return within(f, dir) }) {
			files = append(files, f)
		}
	}
	return roots, files, nil
}

// within reports whether p is under dir.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
