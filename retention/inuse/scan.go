package inuse

import (
	"errors"
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
// Any file that does not parse fails the scan with its name and line, and
// so does a kustomization cycle wherever the scan starts: a kustomization
// the walk found but never scanned fails it (ErrInvalid), never drops out.
// Only regular files are read, each within l (symlinks: see walk).
func Scan(path string, l Limits) ([]Found, error) {
	root, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, path, pathErr(err))
	}
	fi, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, path, pathErr(err))
	}
	s := &scanner{Limits: l, visited: map[string]bool{}}
	if !fi.IsDir() {
		return s.scanFile(path)
	}
	if kustomizationIn(root) != "" {
		return s.scanKustomization(root, nil)
	}
	return s.scanTree(root)
}

// scanner is one scan: its limits, and the kustomizations it has scanned.
type scanner struct {
	Limits
	// visited holds the real paths (realPath) of the kustomization
	// directories scanned so far.
	visited map[string]bool
}

// scanTree scans a directory without a kustomization (see Scan).
func (s *scanner) scanTree(root string) ([]Found, error) {
	kdirs, files, err := s.walk(root)
	if err != nil {
		return nil, err
	}
	listed := map[string]bool{}
	for _, dir := range kdirs {
		k, err := s.readKustomization(kustomizationIn(dir))
		if err != nil {
			return nil, err
		}
		for _, res := range k.entries() {
			if real, err := realPath(filepath.Join(dir, res)); err == nil {
				listed[real] = true
			}
		}
	}
	var out []Found
	for _, dir := range kdirs {
		if real, _ := realPath(dir); !listed[real] {
			found, err := s.scanKustomization(dir, nil)
			if err != nil {
				return nil, err
			}
			out = append(out, found...)
		}
	}
	// A kustomization that only others list, and that scanning them did
	// not reach, is listed from a cycle: scanned directly, the cycle fails
	// the scan. (It used to be dropped, and its running images with it.)
	for _, dir := range kdirs {
		if real, _ := realPath(dir); !s.visited[real] {
			if _, err := s.scanKustomization(dir, nil); err != nil {
				return nil, err
			}
		}
	}
	for _, dir := range kdirs {
		if real, _ := realPath(dir); !s.visited[real] {
			return nil, fmt.Errorf("%w: %s: kustomization listed but never scanned", ErrInvalid, dir) // fail closed
		}
	}
	for _, f := range files {
		found, err := s.scanFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, found...)
	}
	return out, nil
}

// walk finds the kustomization directories under root (a real path) and
// the YAML files outside all of them. Symlinks: one to a directory in the
// tree is not followed (the walk reaches its target where it is); one
// with a YAML name is followed to a regular file in the tree; either kind
// pointing out of the tree, or a dangling YAML one, fails the walk. Other
// symlinks are ignored, like other files.
func (s *scanner) walk(root string) (kdirs, files []string, err error) {
	realRoot, err := realPath(root)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var all []string
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
		yamlName := isYAMLName(p)
		if d.Type()&fs.ModeSymlink != 0 {
			follow, err := followLink(p, realRoot, yamlName)
			if err != nil || !follow {
				return err
			}
		}
		if yamlName {
			all = append(all, p)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for _, f := range all {
		if !slices.ContainsFunc(kdirs, func(dir string) bool { return within(f, dir) }) {
			files = append(files, f)
		}
	}
	return kdirs, files, nil
}

// followLink says whether the walk reads the symlink p (see walk).
func followLink(p, realRoot string, yamlName bool) (bool, error) {
	real, err := realPath(p)
	if err != nil {
		if yamlName {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the link's name, not its target's
			}
			return false, fmt.Errorf("%w: %s: %v", ErrInvalid, p, err)
		}
		return false, nil
	}
	fi, err := os.Stat(real)
	if err != nil {
		return false, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if !fi.IsDir() && !yamlName {
		return false, nil
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return false, fmt.Errorf("%w: %s: a symlink to %s, %s, not a regular file", ErrInvalid, p, real, modeName(fi.Mode()))
	}
	if !within(real, realRoot) {
		return false, fmt.Errorf("%w: %s: a symlink out of the scanned tree (to %s): scan its target itself", ErrInvalid, p, real)
	}
	return !fi.IsDir(), nil
}

func isYAMLName(p string) bool {
	switch strings.ToLower(filepath.Ext(p)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// realPath is p absolute, with its symlinks resolved.
func realPath(p string) (string, error) {
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	return filepath.Abs(real)
}

// within reports whether p is dir or under it.
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// scanFile scans the regular file at p as one YAML stream.
func (s *scanner) scanFile(p string) ([]Found, error) {
	f, err := s.openRegular(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ScanReader(p, f, s.Limits)
}

// pathErr is what went wrong with a path, without the system call and the
// path component it was at ("lstat /a: no such file or directory" for
// /a/b.yaml): the message names the argument itself.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
