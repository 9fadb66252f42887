package referrers

import (
	"context"
	"errors"
	"testing"

	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	"github.com/opencontainers/go-digest"
	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/reclaim-registry/reclaim/storage/layout"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// followFixture is a referrer of subject in a/b on an in-memory driver,
// with its revision link written when linked.
type followFixture struct {
	base    *inmemory.Driver
	subject digest.Digest
	desc    v1.Descriptor
	link    string
}

func newFollowFixture(t *testing.T, linked bool) followFixture {
	t.Helper()
	desc := referrerDesc(1, "a/b")
	f := followFixture{base: inmemory.New(), subject: digest.FromString("subject"), desc: desc,
		link: layout.RevisionLinkPath("a/b", desc.Digest)}
	if linked {
		if err := f.base.PutContent(t.Context(), f.link, []byte(desc.Digest)); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// Follow looks again after each update: a writer of the revision link that
// runs right after a look (forced by the hook) is followed too, and the
// entry ends as the link does.
func TestFollowLooksAgain(t *testing.T) {
	for _, c := range []struct {
		name       string
		linked     bool // the link before Follow
		flips      int  // writes of the link right after a look, alternating
		wantLinked bool
		wantStats  int
		wantErr    error
	}{
		{"linked", true, 0, true, 2, nil},
		{"unlinked", false, 0, false, 2, nil},
		{"deleted after the look", true, 1, false, 3, nil},
		{"written after the look", false, 1, true, 3, nil},
		{"deleted, written again", true, 2, true, 4, nil},
		{"flapping", true, 100, false, followRounds + 1, ErrUnsettled},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, f := t.Context(), newFollowFixture(t, c.linked)
			base, subject, desc, link := f.base, f.subject, f.desc, f.link
			stats, flips := 0, 0
			d := &storagetest.HookDriver{StorageDriver: base, After: func(ctx context.Context, method, p string, _ error) {
				if method != "Stat" || p != link {
					return
				}
				stats++
				if flips == c.flips {
					return
				}
				flips++
				// another request's write of the link, right after this look
				if _, err := base.Stat(ctx, link); err == nil {
					err = base.Delete(ctx, link)
					if err != nil {
						t.Error(err)
					}
				} else if err := base.PutContent(ctx, link, []byte(desc.Digest)); err != nil {
					t.Error(err)
				}
			}}
			r := New(d)
			linked, err := r.Follow(ctx, "a/b", subject, desc)
			if !errors.Is(err, c.wantErr) || (c.wantErr == nil && err != nil) {
				t.Fatalf("Follow: %v, want %v", err, c.wantErr)
			}
			if c.wantErr != nil {
				return
			}
			if linked != c.wantLinked || stats != c.wantStats {
				t.Errorf("Follow = %v after %d looks, want %v after %d", linked, stats, c.wantLinked, c.wantStats)
			}
			got, err := r.List(ctx, "a/b", subject)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := base.Stat(ctx, link); (err == nil) != (len(got) == 1) || len(got) > 1 {
				t.Errorf("entries %v, link there: %v: the entry does not follow the link", got, err == nil)
			}
		})
	}
}

// FollowFrom starts from what the writer's own write left and looks after:
// a PUT whose link a DELETE removed before its upkeep ends with no entry,
// after one look more than when nothing raced it.
func TestFollowFromStartsWithTheWritersWrite(t *testing.T) {
	for _, c := range []struct {
		name      string
		there     bool // the link when the upkeep runs
		wantStats int
	}{
		{"link as written", true, 1},
		{"link removed since", false, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, f := t.Context(), newFollowFixture(t, c.there)
			subject, desc, link := f.subject, f.desc, f.link
			stats := 0
			d := &storagetest.HookDriver{StorageDriver: f.base, After: func(_ context.Context, method, p string, _ error) {
				if method == "Stat" && p == link {
					stats++
				}
			}}
			r := New(d)
			linked, err := r.FollowFrom(ctx, "a/b", subject, desc, true)
			if err != nil || linked != c.there || stats != c.wantStats {
				t.Fatalf("FollowFrom = %v, %v after %d looks, want %v after %d", linked, err, stats, c.there, c.wantStats)
			}
			got, err := r.List(ctx, "a/b", subject)
			if err != nil || (len(got) == 1) != c.there {
				t.Errorf("entries %v (%v), link there: %v", got, err, c.there)
			}
		})
	}
}
