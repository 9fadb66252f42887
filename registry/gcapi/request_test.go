package gcapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

func ptr[T any](v T) *T { return &v }

const planA = "0123456789abcdef01234567"

// parseCases are requests and what they parse to (want nil: a 400).
var parseCases = []struct {
	name, query, body string
	want              *collectRequest // nil: 400
	dryRun            bool            // options().DryRun when valid
}{
	// What a request says.
	{name: "nothing is a dry run", want: &collectRequest{}, dryRun: true},
	{name: "query dry_run=true", query: "dry_run=true", want: &collectRequest{DryRun: ptr(true)}, dryRun: true},
	{name: "query dry_run=false is a real run", query: "dry_run=false", want: &collectRequest{DryRun: ptr(false)}},
	{name: "body dry_run false is a real run", body: `{"dry_run":false}`, want: &collectRequest{DryRun: ptr(false)}},
	{name: "body dry_run true", body: `{"dry_run":true}`, want: &collectRequest{DryRun: ptr(true)}, dryRun: true},
	{name: "options without dry_run are a dry run", query: "untagged=keep&cap=5&async=true",
		want: &collectRequest{Untagged: "keep", Cap: 5, Async: true}, dryRun: true},
	{name: "every query option", query: "dry_run=false&untagged=delete&cap=12&plan=" + planA + "&async=false",
		want: &collectRequest{DryRun: ptr(false), Untagged: "delete", Cap: 12, Plan: planA}},
	{name: "every body field", body: `{"dry_run":false,"untagged":"keep","cap":3,"plan_id":"` + planA + `","async":true}`,
		want: &collectRequest{DryRun: ptr(false), Untagged: "keep", Cap: 3, Plan: planA, Async: true}},
	{name: "split between query and body", query: "cap=2", body: `{"dry_run":false}`,
		want: &collectRequest{DryRun: ptr(false), Cap: 2}},
	{name: "percent-encoded name and value", query: "dry%5Frun=fals%65", want: &collectRequest{DryRun: ptr(false)}},
	{name: "JSON-escaped field name", body: `{"dry\u005frun":false}`, want: &collectRequest{DryRun: ptr(false)}},
	{name: "space around the body", body: " \n\t{ \"dry_run\" : true }\r\n ", want: &collectRequest{DryRun: ptr(true)}, dryRun: true},
	{name: "empty body", body: "   ", want: &collectRequest{}, dryRun: true},
	{name: "empty object", body: "{}", want: &collectRequest{}, dryRun: true},
	{name: "empty query segments", query: "&dry_run=true&", want: &collectRequest{DryRun: ptr(true)}, dryRun: true},

	// Rejected: the query.
	{name: "bad escape", query: "dry_run=tru%e"},
	{name: "bad escape in another pair", query: "dry_run=true&cap=%zz"},
	{name: "bad escape in a name", query: "dry%_run=true"},
	{name: "semicolon after the value", query: "dry_run=true;"},
	{name: "semicolon separator", query: "dry_run=true;dry_run=false"},
	{name: "fragment", query: "dry_run=false#x"},
	{name: "plus in the value", query: "dry_run=false+"},
	{name: "empty value", query: "dry_run="},
	{name: "no value", query: "dry_run"},
	{name: "repeated", query: "dry_run=true&dry_run=false"},
	{name: "repeated, agreeing", query: "dry_run=false&dry_run=false"},
	{name: "unknown parameter", query: "dry_run=true&force=1"},
	{name: "empty name", query: "=false"},
	{name: "case", query: "DRY_RUN=false"},
	{name: "body field name in the query", query: "plan_id=" + planA},
	{name: "ParseBool's 1", query: "dry_run=1"},
	{name: "ParseBool's 0", query: "dry_run=0"},
	{name: "ParseBool's F", query: "dry_run=F"},
	{name: "ParseBool's FALSE", query: "dry_run=FALSE"},
	{name: "ParseBool's True", query: "dry_run=True"},
	{name: "yes", query: "dry_run=yes"},
	{name: "async 1", query: "async=1"},
	{name: "cap 0", query: "cap=0"},
	{name: "cap negative", query: "cap=-1"},
	{name: "cap plus", query: "cap=+1"},
	{name: "cap leading zero", query: "cap=01"},
	{name: "cap overflow", query: "cap=99999999999999999999999"},
	{name: "cap float", query: "cap=1.0"},
	{name: "untagged case", query: "untagged=Keep"},
	{name: "bad plan id", query: "plan=zzz"},

	// Rejected: the body.
	{name: "field in another case", body: `{"dry_run":true,"DRY_RUN":false}`},
	{name: "field only in another case", body: `{"Dry_Run":false}`},
	{name: "duplicate field", body: `{"dry_run":true,"dry_run":false}`},
	{name: "duplicate field, agreeing", body: `{"dry_run":false,"dry_run":false}`},
	{name: "trailing garbage", body: `{"dry_run":true} garbage`},
	{name: "trailing object", body: `{"dry_run":true}{"dry_run":false}`},
	{name: "trailing comma", body: `{"dry_run":false,}`},
	{name: "unterminated", body: `{"dry_run":false`},
	{name: "unknown field", body: `{"dry_run":true,"force":true}`},
	{name: "query name in the body", body: `{"plan":"` + planA + `"}`},
	{name: "string bool", body: `{"dry_run":"false"}`},
	{name: "number bool", body: `{"dry_run":0}`},
	{name: "null bool", body: `{"dry_run":null}`},
	{name: "null body", body: `null`},
	{name: "array body", body: `[{"dry_run":false}]`},
	{name: "string body", body: `"dry_run=false"`},
	{name: "cap as string", body: `{"cap":"5"}`},
	{name: "cap float", body: `{"cap":5.0}`},
	{name: "cap exponent", body: `{"cap":5e0}`},
	{name: "cap zero", body: `{"cap":0}`},
	{name: "cap negative", body: `{"cap":-5}`},
	{name: "untagged number", body: `{"untagged":1}`},
	{name: "nested object value", body: `{"dry_run":{"dry_run":false}}`},

	// Query and body: one place per option.
	{name: "both, disagreeing", query: "dry_run=true", body: `{"dry_run":false}`},
	{name: "both, agreeing", query: "dry_run=false", body: `{"dry_run":false}`},
	{name: "plan in both", query: "plan=" + planA, body: `{"plan_id":"` + planA + `"}`},
}

// TestParseCollectRequest: every request that does not say exactly what
// the API documents is a 400, and a real run needs dry_run=false.
func TestParseCollectRequest(t *testing.T) {
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseCollectRequest(tc.query, []byte(tc.body))
			if tc.want == nil {
				if !errors.Is(err, errBadRequest) {
					t.Fatalf("accepted (or wrong error %v): %+v", err, got)
				}
				if code, _ := statusOf(err); code != 400 {
					t.Fatalf("status %d", code)
				}
				if !got.options().DryRun {
					t.Fatal("a rejected request's options are a real run")
				}
				return
			}
			if err != nil {
				t.Fatalf("rejected: %v", err)
			}
			if !reflect.DeepEqual(got, *tc.want) {
				t.Fatalf("got %+v, want %+v", got, *tc.want)
			}
			if o := got.options(); o.DryRun != tc.dryRun {
				t.Fatalf("dry run %v, want %v", o.DryRun, tc.dryRun)
			}
		})
	}
}

// fuzzSeeds are FuzzCollectRequest's seed (query, body) pairs.
var fuzzSeeds = [][2]string{
	// Spellings a lenient parser misreads.
	{"dry_run=tru%e", ""},
	{"dry_run=true;", ""},
	{"dry_run=false;", ""},
	{"dry_run=true;dry_run=false", ""},
	{"", `{"dry_run":true,"DRY_RUN":false}`},
	{"", `{"dry_run":true,"dry_run":false}`},
	{"", `{"dry_run":true} garbage`},
	// Around them.
	{"", ""},
	{"dry_run=false", ""},
	{"dry_run=true", ""},
	{"", `{"dry_run":false}`},
	{"dry_run=true", `{"dry_run":false}`},
	{"dry_run=false", `{"dry_run":false}`},
	{"dry_run=1", ""},
	{"dry_run=False", ""},
	{"dry_run=", ""},
	{"dry_run", ""},
	{"dry%5Frun=false", ""},
	{"dry_run=false#x", ""},
	{"dry_run=false&dry_run=false", ""},
	{"DRY_RUN=false", ""},
	{"=false", ""},
	{"cap=0", ""},
	{"cap=-1", ""},
	{"cap=01", ""},
	{"", `{"cap":1.0}`},
	{"", `{"dry_run":null}`},
	{"", `{"dry_run":"false"}`},
	{"", `{"Dry_Run":false}`},
	{"", `{"dry\u005frun":false}`},
	{"", `{"dry_run":false}{}`},
	{"", `{"dry_run":false,}`},
	{"", `null`},
	{"", `[]`},
	{"async=true&dry_run=false&untagged=keep&cap=5&plan=" + planA, ""},
	{"", `{"dry_run":false,"untagged":"keep","cap":5,"plan_id":"` + planA + `","async":true}`},
}

// FuzzCollectRequest: no query and body both parse and mean something other
// than what they say. A request that does not parse is never a real run; a
// real run is only ever the result of dry_run=false spelled out exactly
// once, in the query or in the body.
func FuzzCollectRequest(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s[0], []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, query string, body []byte) {
		req, err := parseCollectRequest(query, body)
		o := req.options()
		if err != nil {
			if !errors.Is(err, errBadRequest) {
				t.Fatalf("error is not a 400: %v", err)
			}
			if !reflect.DeepEqual(req, collectRequest{}) || !o.DryRun {
				t.Fatalf("a rejected request carries options %+v", req)
			}
			return
		}
		q, lenient := wellFormed(t, query, body)
		agrees(t, q, lenient, req)

		// A real run: dry_run=false spelled out exactly once, counting
		// every spelling of the name in any case, in the query and at the
		// top level of the body.
		mentions := dryRunMentions(t, query, body)
		if !o.DryRun && (len(mentions) != 1 || mentions[0] != "false") {
			t.Fatalf("real run from dry_run mentions %q (query %q, body %q)", mentions, query, body)
		}
		if o.DryRun && len(mentions) == 1 && mentions[0] == "false" {
			t.Fatalf("dry_run=false spelled out, but a dry run")
		}
	})
}

// lenientRequest is a body as json.Unmarshal reads it: last duplicate
// wins, field names in any case.
type lenientRequest struct {
	DryRun   *bool   `json:"dry_run"`
	Untagged *string `json:"untagged"`
	Cap      *int    `json:"cap"`
	Plan     *string `json:"plan_id"`
	Async    *bool   `json:"async"`
}

// wellFormed checks that the standard parsers agree an accepted request is
// well formed, and returns their lenient readings of it: r.URL.Query()'s
// and json.Unmarshal's.
func wellFormed(t *testing.T, query string, body []byte) (url.Values, lenientRequest) {
	q, qerr := url.ParseQuery(query)
	if qerr != nil {
		t.Fatalf("accepted a query url.ParseQuery rejects: %v", qerr)
	}
	var lenient lenientRequest
	if len(bytes.TrimSpace(body)) > 0 {
		if !json.Valid(body) || bytes.TrimSpace(body)[0] != '{' {
			t.Fatalf("accepted a body that is not one JSON object: %q", body)
		}
		if err := json.Unmarshal(body, &lenient); err != nil {
			t.Fatalf("accepted a body json.Unmarshal rejects: %v", err)
		}
	}
	for name, v := range q {
		if len(v) != 1 {
			t.Fatalf("accepted %q given %d times", name, len(v))
		}
	}
	return q, lenient
}

// agrees checks that the lenient readings see nothing the parse does not:
// every option comes from one place, with the value the parse gives it.
func agrees(t *testing.T, q url.Values, lenient lenientRequest, req collectRequest) {
	onePlace(t, q, "dry_run", lenient.DryRun, req.DryRun, (*bool)(nil))
	if v, ok := q["dry_run"]; ok && (req.DryRun == nil || v[0] != map[bool]string{true: "true", false: "false"}[*req.DryRun]) {
		t.Fatalf("query dry_run=%q, parsed %v", v[0], req.DryRun)
	}
	if lenient.DryRun != nil && (req.DryRun == nil || *lenient.DryRun != *req.DryRun) {
		t.Fatalf("body dry_run %v, parsed %v", *lenient.DryRun, req.DryRun)
	}
	onePlace(t, q, "untagged", lenient.Untagged, req.Untagged, "")
	if v, ok := q["untagged"]; ok && v[0] != req.Untagged {
		t.Fatalf("query untagged=%q, parsed %q", v[0], req.Untagged)
	}
	if lenient.Untagged != nil && *lenient.Untagged != req.Untagged {
		t.Fatalf("body untagged %q, parsed %q", *lenient.Untagged, req.Untagged)
	}
	onePlace(t, q, "cap", lenient.Cap, req.Cap, 0)
	if lenient.Cap != nil && *lenient.Cap != req.Cap {
		t.Fatalf("body cap %d, parsed %d", *lenient.Cap, req.Cap)
	}
	if req.Cap < 0 {
		t.Fatalf("negative cap %d", req.Cap)
	}
	onePlace(t, q, "plan", lenient.Plan, req.Plan, "")
	if lenient.Plan != nil && *lenient.Plan != req.Plan {
		t.Fatalf("body plan %q, parsed %q", *lenient.Plan, req.Plan)
	}
	onePlace(t, q, "async", lenient.Async, req.Async, false)
	if lenient.Async != nil && *lenient.Async != req.Async {
		t.Fatalf("body async %v, parsed %v", *lenient.Async, req.Async)
	}
}

// onePlace: option name is not given in both the query and the body
// (inBody, a pointer), and is zero when given in neither.
func onePlace(t *testing.T, q url.Values, name string, inBody, got, zero any) {
	_, qok := q[name]
	bok := !reflect.ValueOf(inBody).IsNil()
	switch {
	case qok && bok:
		t.Fatalf("%s accepted from both query and body", name)
	case !qok && !bok && !reflect.DeepEqual(got, zero):
		t.Fatalf("%s set to %v though neither query nor body gives it", name, got)
	}
}

// dryRunMentions lists the values of every query parameter and top-level
// body field whose name is dry_run in any case, as text ("false" for both
// dry_run=false and "dry_run": false). It reads the raw query pair by pair
// and the body token by token, independently of the parser under test.
func dryRunMentions(t *testing.T, query string, body []byte) []string {
	var out []string
	for _, pair := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(pair, "=")
		uk, err1 := url.QueryUnescape(k)
		uv, err2 := url.QueryUnescape(v)
		if err1 != nil || err2 != nil {
			t.Fatalf("accepted a bad escape in %q", pair)
		}
		if strings.EqualFold(uk, "dry_run") {
			out = append(out, uv)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return out
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("accepted body %q: %v", body, err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			t.Fatalf("accepted body %q: %v", body, err)
		}
		if k, _ := tok.(string); strings.EqualFold(k, "dry_run") {
			out = append(out, string(raw))
		}
	}
	if _, err := dec.Token(); err != nil {
		t.Fatalf("accepted body %q: %v", body, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("accepted body %q with trailing data", body)
	}
	return out
}

// TestValidateRepository: a name is valid when Distribution would serve it
// under /v2/<name>/ and storage can hold it, and docs/openapi.yaml says the
// same.
func TestValidateRepository(t *testing.T) {
	doc, err := os.ReadFile("../../docs/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+pattern: "(\^\(\([^"]+)"$`).FindSubmatch(doc)
	if m == nil {
		t.Fatal("no repository name pattern in docs/openapi.yaml")
	}
	documented := regexp.MustCompile(strings.ReplaceAll(string(m[1]), `\\`, `\`))
	for _, tc := range []struct {
		name  string
		valid bool
	}{
		{"a", true},
		{"team/app", true},
		{"team/backend/api", true},
		{"a-b.c/d__e/f---g", true},
		{"localhost/a", true},
		{"example.com/a", true},
		{"Example.com/a", true}, // a host part may have capitals, as in /v2/
		{"localhost:5000/a", false},
		{"127.0.0.1:5000/a", false},
		{"[::1]/a", false},
		{"[::1]:5000/a", false},
		{"", false},
		{"Team", false},
		{"team/App", false},
		{"a//b", false},
		{"a/", false},
		{"/a", false},
		{"a/_layers", false},
		{"a/../b", false},
		{"a b", false},
		{strings.Repeat("a", 255), true},
		{strings.Repeat("a", 256), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateRepository(tc.name)
			if (err == nil) != tc.valid {
				t.Fatalf("valid=%v, want %v (%v)", err == nil, tc.valid, err)
			}
			if err != nil {
				if code, body := statusOf(err); code != 400 || body.Code != "NAME_INVALID" {
					t.Fatalf("%d %s", code, body.Code)
				}
			}
			if documented.MatchString(tc.name) != tc.valid && len(tc.name) <= 255 {
				t.Fatalf("docs/openapi.yaml pattern says valid=%v", !tc.valid)
			}
		})
	}
}
