package registry_test

import (
	"net/http"
	"strings"
	"testing"
)

// Issue 25, finding 3: every JSON body is read as collect's is. A key in
// the wrong case, a key given twice (encoding/json let the last win:
// {"keep_newest":5,"keep_newest":0} ran with 0) or an unknown key is a 400
// PARAM_INVALID, and nothing is stored.
func TestE2EStrictJSONBodies(t *testing.T) {
	g := startGC(t)
	deletable(t, g, "json/app")
	img := `{"repository":"json/app","digest":"sha256:` + strings.Repeat("a", 64) + `"}`
	for _, c := range []struct{ name, method, path, body string }{
		{"collect, duplicate", http.MethodPost, "/gc/v1/repositories/json/app/collect", `{"dry_run":true,"dry_run":false}`},
		{"collect, wrong case", http.MethodPost, "/gc/v1/repositories/json/app/collect", `{"DRY_RUN":false}`},
		{"retention preview, duplicate", http.MethodPost, "/gc/v1/repositories/json/app/retention/preview", `{"keep_newest":5,"keep_newest":0}`},
		{"retention preview, wrong case", http.MethodPost, "/gc/v1/repositories/json/app/retention/preview", `{"Keep_Newest":0}`},
		{"retention preview, unknown", http.MethodPost, "/gc/v1/repositories/json/app/retention/preview", `{"keep_newst":0}`},
		{"retention apply, unknown", http.MethodPost, "/gc/v1/repositories/json/app/retention/plans/0123456789abcdef01234567/apply", `{"force":true}`},
		{"pin, duplicate", http.MethodPut, "/gc/v1/repositories/json/app/pins/keep", `{"note":"a","note":"b"}`},
		{"pin, wrong case", http.MethodPut, "/gc/v1/repositories/json/app/pins/keep", `{"Note":"a"}`},
		{"pin, data after", http.MethodPut, "/gc/v1/repositories/json/app/pins/keep", `{"note":"a"} {}`},
		{"in-use, duplicate", http.MethodPut, "/gc/v1/inuse/sources/prod", `{"images":[],"images":[` + img + `]}`},
		{"in-use, wrong case", http.MethodPut, "/gc/v1/inuse/sources/prod", `{"Images":[` + img + `]}`},
		{"in-use image, duplicate", http.MethodPut, "/gc/v1/inuse/sources/prod",
			`{"images":[{"repository":"json/app","repository":"other/app","digest":"sha256:` + strings.Repeat("a", 64) + `"}]}`},
		{"in-use image, wrong case", http.MethodPut, "/gc/v1/inuse/sources/prod",
			`{"images":[{"Repository":"json/app","digest":"sha256:` + strings.Repeat("a", 64) + `"}]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			rejected(t, g, "PARAM_INVALID", c.method, c.path, c.body)
		})
	}
	// Nothing was stored: no pin, no source.
	if code, _, b := g.send(t, http.MethodGet, "/gc/v1/repositories/json/app/pins/keep", ""); code != http.StatusNotFound {
		t.Errorf("pin: %d %s, want 404", code, b)
	}
	if code, _, b := g.send(t, http.MethodGet, "/gc/v1/inuse/sources/prod", ""); code != http.StatusNotFound {
		t.Errorf("in-use source: %d %s, want 404", code, b)
	}
	// The same bodies, well formed, are taken.
	if code, _, b := g.send(t, http.MethodPut, "/gc/v1/repositories/json/app/pins/keep", `{"note":"a","expires_in":"1h"}`); code != http.StatusCreated {
		t.Errorf("pin: %d %s", code, b)
	}
	if code, _, b := g.send(t, http.MethodPut, "/gc/v1/inuse/sources/prod", `{"images":[]}`); code != http.StatusOK {
		t.Errorf("in-use source: %d %s", code, b)
	}
}
