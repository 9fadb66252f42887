package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/reclaim/trashentry"
)

// fakeTrash is a trash on made-up entries that records the restores asked
// of it.
type fakeTrash struct {
	entries  []trashentry.Entry // newest first, as Bin.List
	restored []RestoreSelector
	deny     error
}

// withTrash turns the fixture's trash on, on ft.
func (f *pagesFixture) withTrash(ft *fakeTrash) {
	f.h.cfg.Trash = &Trash{
		Keep: 72 * time.Hour,
		List: func(context.Context) ([]trashentry.Entry, error) { return ft.entries, nil },
		Held: func(context.Context) (int, int64, error) {
			var n int64
			for _, e := range ft.entries {
				n += e.Size
			}
			return len(ft.entries), n, nil
		},
		Hits: func(_ context.Context, days int) (int64, error) { return int64(days) * 2, nil },
		Validate: func(s RestoreSelector) error {
			if (s.Repo != "") == (s.Run != "" || s.Plan != "") || s.Repo != "" && (s.Tag == "") == (s.Digest == "") {
				return errors.New("give exactly one of repository (with tag or digest), run or plan")
			}
			return nil
		},
		Authorize: func(*http.Request, RestoreSelector) error { return ft.deny },
		Restore: func(_ context.Context, s RestoreSelector) ([]Restored, error) {
			ft.restored = append(ft.restored, s)
			var out []Restored
			for i, o := range trashentry.Outcomes() {
				out = append(out, Restored{Entry: ft.entries[i%len(ft.entries)], Outcome: o, Detail: "detail of " + o.String()})
			}
			return out, nil
		},
	}
}

// trashEntries are a run's tag-less deletions, a plan's tag deletions (one
// tag removed twice: the older entry is superseded) and a reclaimer's blob.
func trashEntries(now time.Time) []trashentry.Entry {
	exp := func(e trashentry.Entry) trashentry.Entry { e.Expires = e.Removed.Add(72 * time.Hour); return e }
	return []trashentry.Entry{
		exp(trashentry.Entry{ID: "5-a", Kind: reclaim.KindTag, Repo: "team/app", Tag: "v1", Digest: dg("m-v1b"), Size: 900,
			Reason: "retention", By: "retention", Plan: "0123456789abcdef01234567", Removed: now.Add(-time.Minute)}),
		exp(trashentry.Entry{ID: "4-a", Kind: reclaim.KindManifest, Repo: "team/app", Digest: dg("m-old"), Size: 1500,
			Reason: "unreferenced", By: "gc", Run: "01bigrealrun", Removed: now.Add(-2 * time.Minute)}),
		exp(trashentry.Entry{ID: "3-a", Kind: reclaim.KindLayerLink, Repo: "team/app", Digest: dg("layer"), Size: 4 << 20,
			Reason: "unreferenced", By: "gc", Run: "01bigrealrun", Removed: now.Add(-3 * time.Minute)}),
		exp(trashentry.Entry{ID: "2-a", Kind: reclaim.KindTag, Repo: "team/app", Tag: "v1", Digest: dg("m-v1a"), Size: 800,
			Reason: "retention", By: "retention", Plan: "0123456789abcdef01234567", Removed: now.Add(-time.Hour)}),
		exp(trashentry.Entry{ID: "1-a", Kind: reclaim.KindBlob, Digest: dg("orphan"), Size: 2048,
			Reason: "unreferenced", By: "reclaimer", Removed: now.Add(-2 * time.Hour)}),
	}
}

// post sends a form to the console and returns the status and the page.
func (f *pagesFixture) post(t *testing.T, path string, form url.Values, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, f.srv.URL+Prefix+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	code, b := roundTrip(t, req)
	return code, string(b)
}

// The Trash page lists the entries newest first with what each holds, why
// and by what it was removed (the run's page, the retention plan), until
// when it is restorable, and a restore button that names it; the newest
// removal of a tag restores it, an older one says so instead.
func TestTrashPage(t *testing.T) {
	f := newPagesFixture(t)
	ft := &fakeTrash{entries: trashEntries(time.Now().UTC())}
	f.withTrash(ft)
	page := f.get(t, "trash")
	sec := page[strings.Index(page, `<section id="trash-entries">`):]
	for i, e := range ft.entries {
		j := strings.Index(sec, `title="`+e.Digest.String()+`"`)
		if j < 0 {
			t.Fatalf("entry %s (%s) is not listed", e.ID, e.Kind)
		}
		if i > 0 && j < strings.Index(sec, `title="`+ft.entries[i-1].Digest.String()+`"`) {
			t.Errorf("entry %s is listed before a newer one", e.ID)
		}
	}
	row := func(d string) string { return trOf(t, sec, `title="`+dg(d).String()+`"`) }
	newest := row("m-v1b")
	if got := cell(t, newest, "Tag"); !strings.HasPrefix(got, "v1 → "+dg("m-v1b").String()) {
		t.Errorf("the tag entry's Tag cell reads %q", got)
	}
	until := ft.entries[0].Expires.Format("2006-01-02 15:04:05Z")
	if got := cell(t, newest, "Restorable until"); got != until {
		t.Errorf("Restorable until reads %q; want %s", got, until)
	}
	if !strings.Contains(newest, `name="tag" value="v1"`) || !strings.Contains(newest, `name="repository" value="team/app"`) ||
		!strings.Contains(newest, `href="/gc/console/retention#plan-0123456789abcdef01234567"`) {
		t.Errorf("the newest tag entry restores by repository and tag, and links its plan:\n%s", newest)
	}
	if older := row("m-v1a"); strings.Contains(older, "<form") || !strings.Contains(text(older), "removed again later") {
		t.Errorf("the older removal of the tag has a restore button:\n%s", older)
	}
	manifest := row("m-old")
	if !strings.Contains(manifest, `name="digest" value="`+dg("m-old").String()+`"`) || !strings.Contains(manifest, `href="/gc/console/runs/01bigrealrun"`) ||
		!strings.Contains(manifest, `class="copy" data-copy="`+dg("m-old").String()+`"`) || cell(t, manifest, "Size") != "1.5 KiB" {
		t.Errorf("the manifest entry restores by digest, links its run, copies its digest, shows its size:\n%s", manifest)
	}
	if blob := row("orphan"); strings.Contains(blob, "<form") || !strings.Contains(text(blob), "nothing to put back") {
		t.Errorf("the reclaimer's blob (no repository) has a restore button:\n%s", blob)
	}
	if got := text(page[strings.Index(page, `id="trash-facts"`):]); !strings.Contains(got, "Entries 5 Held 4.0 MiB (4199552 bytes)") {
		t.Errorf("the facts read %.80s", got)
	}
	groups := page[strings.Index(page, `<section id="trash-groups">`):strings.Index(page, `<section id="trash-entries">`)]
	if !strings.Contains(groups, `name="run" value="01bigrealrun"`) || !strings.Contains(groups, `name="plan" value="0123456789abcdef01234567"`) ||
		!strings.Contains(text(groups), "Restore all 2") {
		t.Errorf("no restore of the run and of the plan:\n%s", text(groups))
	}
	// filtered to the run
	if got := text(f.get(t, "trash?run=01bigrealrun")); !strings.Contains(got, "Entries 2 of run 01bigrealrun") {
		t.Errorf("?run=: %.400s", got)
	}
	over := f.get(t, "")
	card := text(over[strings.Index(over, `id="card-trash"`):][:strings.Index(over[strings.Index(over, `id="card-trash"`):], "</div>")])
	if !strings.Contains(card, "Held 4.0 MiB (4199552 bytes) in 5 entries") || !strings.Contains(card, "Trash hits, 7 days 14") {
		t.Errorf("the trash card: %s", card)
	}
	if strings.Contains(over, "deletions are final") {
		t.Errorf("the overview says deletions are final with the trash on")
	}
}

// With the trash off, the trash page, the Collects and the Freed cards
// say deletions are final; there is no trash card, and a restore is 404.
func TestTrashOff(t *testing.T) {
	f := newPagesFixture(t)
	if got := text(f.get(t, "trash")); !strings.Contains(got, "Trash off: deletions are final") {
		t.Errorf("trash page: %.400s", got)
	}
	over := f.get(t, "")
	if strings.Contains(over, `id="card-trash"`) || strings.Count(text(over), "Trash off: deletions are final.") != 2 {
		t.Errorf("the overview with the trash off: %s", text(over))
	}
	if code, page := f.post(t, "trash/restore", url.Values{"run": {"01bigrealrun"}}, nil); code != http.StatusNotFound ||
		!strings.Contains(page, "deletions are final") {
		t.Errorf("restore with the trash off: %d %s", code, text(page))
	}
}

// A restore posted from the console's own page puts back what the form
// names and shows each entry's outcome in words; one another site's page
// posts is refused before anything is asked, as a denied or a malformed
// one.
func TestTrashRestorePost(t *testing.T) {
	f := newPagesFixture(t)
	ft := &fakeTrash{entries: trashEntries(time.Now().UTC())}
	f.withTrash(ft)
	tag := url.Values{"repository": {"team/app"}, "tag": {"v1"}}
	for _, h := range []http.Header{{"Sec-Fetch-Site": {"cross-site"}}, {"Origin": {"https://evil.example"}}, {"Sec-Fetch-Site": {"same-site"}}} {
		if code, page := f.post(t, "trash/restore", tag, h); code != http.StatusForbidden || !strings.Contains(page, "console&#39;s own pages") {
			t.Errorf("restore with %v: %d %s", h, code, text(page))
		}
	}
	ft.deny = errors.New("denied: no delete on team/app")
	if code, _ := f.post(t, "trash/restore", tag, nil); code != http.StatusForbidden {
		t.Errorf("a denied restore: %d, want the Deny's 403", code)
	}
	ft.deny = nil
	if code, _ := f.post(t, "trash/restore", url.Values{"repository": {"team/app"}}, nil); code != http.StatusBadRequest {
		t.Errorf("a restore of a repository without tag or digest: %d, want 400", code)
	}
	if len(ft.restored) != 0 {
		t.Fatalf("refused restores restored %v", ft.restored)
	}
	code, page := f.post(t, "trash/restore", tag, http.Header{"Sec-Fetch-Site": {"same-origin"}})
	if code != http.StatusOK || len(ft.restored) != 1 || ft.restored[0] != (RestoreSelector{Repo: "team/app", Tag: "v1"}) {
		t.Fatalf("restore: %d, restored %v", code, ft.restored)
	}
	rep := page[strings.Index(page, `<section id="restore-report">`):]
	rep = rep[:strings.Index(rep, "</section>")]
	if got := text(rep); !strings.Contains(got, "2 entries put back, 4 left in the trash.") {
		t.Errorf("summary: %s", got)
	}
	for o, want := range map[string]string{"restored": "restored detail of restored", "already_there": "already there",
		"tag_moved": "tag moved: left alone detail of tag_moved", "purged": "purged: data gone", "failed": "failed detail of failed",
		"not_linkable": "not put back"} {
		if got := text(trOf(t, rep, "outcome-"+o+`"`)); !strings.HasPrefix(got, want) {
			t.Errorf("outcome %s reads %q; want %q first", o, got, want)
		}
	}
	if !strings.Contains(page, `<section id="trash-entries">`) {
		t.Errorf("after a restore, the page does not list the trash")
	}
}

// A run that moved blobs to the trash shows them apart from what it freed,
// with until when they are restorable, in the lists and on its page.
func TestRunMovedToTrash(t *testing.T) {
	f := newPagesFixture(t)
	until := time.Now().Add(72 * time.Hour).UTC()
	f.big.BlobsInTrash, f.big.BytesInTrash, f.big.RestorableUntil = []digest.Digest{dg("t1"), dg("t2")}, 3<<20, &until
	defer func() { f.big.BlobsInTrash, f.big.BytesInTrash, f.big.RestorableUntil = nil, 0, nil }()
	when := until.Format("2006-01-02 15:04:05Z")
	if got := cell(t, rowOfRun(t, f.get(t, "runs"), f.big.RunID), "Freed"); got != "5.0 MiB moved 3.0 MiB to trash (restorable until "+when+")" {
		t.Errorf("the Freed cell reads %q", got)
	}
	page := text(f.get(t, "runs/"+f.big.RunID))
	if !strings.Contains(page, "Freed 5.0 MiB (5242880 bytes) Moved to trash 2 blobs, 3.0 MiB (3145728 bytes), held, not freed; restorable until "+when) {
		t.Errorf("the run's facts: %.1500s", page)
	}
}

// Every outcome a restore can report has words on the page.
func TestEveryRestoreOutcomeHasWords(t *testing.T) {
	for _, o := range trashentry.Outcomes() {
		if outcomeWords[o] == "" {
			t.Errorf("restore outcome %s has no words", o)
		}
	}
}
