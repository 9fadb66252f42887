package linkdb

import (
	"context"
	"errors"
	"slices"
	"testing"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
)

// The rebuild's direct reads answer as the filesystem driver does: the
// same content, the same FileInfo, the same listing, and a
// PathNotFoundError exactly where the driver gives one.
func TestFSReadsAnswerAsTheDriver(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := filesystem.New(filesystem.DriverParameters{RootDirectory: root, MaxThreads: 100})
	for p, c := range map[string]string{"/a/b/link": "sha256:abc\n", "/a/c/data": string(make([]byte, 3000)), "/top": ""} {
		if err := d.PutContent(ctx, p, []byte(c)); err != nil {
			t.Fatal(err)
		}
	}
	w, err := newFSWriter(root)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	r := readsOf(w, d)
	if _, ok := r.(*fsReads); !ok {
		t.Fatalf("readsOf the filesystem writer: %T", r)
	}
	notFound := func(err error) bool {
		var nf storagedriver.PathNotFoundError
		return errors.As(err, &nf)
	}
	same := func(what, p string, errD, errR error) bool {
		t.Helper()
		if (errD == nil) != (errR == nil) || notFound(errD) != notFound(errR) {
			t.Errorf("%s %s: driver %v, direct %v", what, p, errD, errR)
			return false
		}
		var nfD, nfR storagedriver.PathNotFoundError
		if errors.As(errD, &nfD) && errors.As(errR, &nfR) && nfD.Path != nfR.Path {
			t.Errorf("%s %s: not found names %q, the driver %q", what, p, nfR.Path, nfD.Path)
		}
		return errD == nil
	}
	paths := []string{"/", "/a", "/a/b", "/a/b/link", "/a/c/data", "/top", "/missing", "/a/missing/deeper", "/a/b/link/under-a-file"}
	for _, p := range paths {
		bD, errD := d.GetContent(ctx, p)
		bR, errR := r.GetContent(ctx, p)
		if same("GetContent", p, errD, errR) && string(bD) != string(bR) {
			t.Errorf("GetContent %s: %q, the driver %q", p, bR, bD)
		}
		fD, errD := d.Stat(ctx, p)
		fR, errR := r.Stat(ctx, p)
		if same("Stat", p, errD, errR) && (fD.Path() != fR.Path() || fD.IsDir() != fR.IsDir() || fD.Size() != fR.Size() || !fD.ModTime().Equal(fR.ModTime())) {
			t.Errorf("Stat %s: %s dir=%v size=%d %s, the driver %s dir=%v size=%d %s", p,
				fR.Path(), fR.IsDir(), fR.Size(), fR.ModTime(), fD.Path(), fD.IsDir(), fD.Size(), fD.ModTime())
		}
		lD, errD := d.List(ctx, p)
		lR, errR := r.List(ctx, p)
		slices.Sort(lD)
		slices.Sort(lR)
		if same("List", p, errD, errR) && !slices.Equal(lD, lR) {
			t.Errorf("List %s: %v, the driver %v", p, lR, lD)
		}
	}
}
