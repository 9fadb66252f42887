package registry_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/opencontainers/go-digest"
)

// A source's set is replaced whole, listed with its age, read back and
// forgotten; malformed uploads are 400 and change nothing.
func TestE2EInUseSources(t *testing.T) {
	g := startGC(t)
	a, b := digest.FromString("a"), digest.FromString("b")
	put := func(name, body string) (int, []byte) {
		code, _, out := g.send(t, http.MethodPut, "/gc/v1/inuse/sources/"+name, body)
		return code, out
	}
	body := `{"images":[{"repository":"team/app","digest":"` + a.String() + `"},{"repository":"shared/base","digest":"` + b.String() +
		`"},{"repository":"team/app","digest":"` + a.String() + `"}]}`
	if code, out := put("prod-eu", body); code != http.StatusOK {
		t.Fatalf("PUT: %d %s", code, out)
	}
	if code, out := put("preview", `{"images":[]}`); code != http.StatusOK {
		t.Fatalf("PUT empty: %d %s", code, out)
	}
	for _, tc := range []struct{ name, body, code string }{
		{"prod-eu", `{"images":[{"repository":"Team/App","digest":"` + a.String() + `"}]}`, "PARAM_INVALID"},
		{"prod-eu", `{"images":[{"repository":"localhost:5000/a","digest":"` + a.String() + `"}]}`, "PARAM_INVALID"},
		{"prod-eu", `{"images":[{"repository":"team/app","digest":"sha256:nope"}]}`, "PARAM_INVALID"},
		{"prod-eu", `{}`, "PARAM_INVALID"},
		{"prod-eu", `{"images":[],"extra":1}`, "PARAM_INVALID"},
		{"bad{name}", `{"images":[]}`, "PARAM_INVALID"},
	} {
		code, out := put(tc.name, tc.body)
		if c, _ := decodeErr(t, out); code != http.StatusBadRequest || c != tc.code {
			t.Errorf("PUT %s %s: %d %s", tc.name, tc.body, code, out)
		}
	}
	code, _, out := g.send(t, http.MethodGet, "/gc/v1/inuse/sources/prod-eu", "")
	var one struct {
		Source struct {
			Images     int   `json:"images"`
			AgeSeconds int64 `json:"age_seconds"`
		} `json:"source"`
		Images []struct{ Repository, Digest string } `json:"images"`
	}
	if code != http.StatusOK || json.Unmarshal(out, &one) != nil || one.Source.Images != 2 || len(one.Images) != 2 ||
		one.Images[0].Repository != "shared/base" || one.Images[1].Digest != a.String() {
		t.Fatalf("GET one: %d %s", code, out)
	}
	code, _, out = g.send(t, http.MethodGet, "/gc/v1/inuse/sources", "")
	var list struct {
		Sources []struct {
			Name   string `json:"name"`
			Images int    `json:"images"`
		} `json:"sources"`
	}
	if code != http.StatusOK || json.Unmarshal(out, &list) != nil || len(list.Sources) != 2 || list.Sources[0].Name != "preview" ||
		list.Sources[0].Images != 0 || list.Sources[1].Images != 2 {
		t.Fatalf("GET list: %d %s", code, out)
	}
	if code, _, out := g.send(t, http.MethodDelete, "/gc/v1/inuse/sources/prod-eu", ""); code != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", code, out)
	}
	code, _, out = g.send(t, http.MethodGet, "/gc/v1/inuse/sources/prod-eu", "")
	if c, _ := decodeErr(t, out); code != http.StatusNotFound || c != "SOURCE_UNKNOWN" {
		t.Fatalf("GET deleted: %d %s", code, out)
	}
}
