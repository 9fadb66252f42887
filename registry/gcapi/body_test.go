package gcapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/reclaim-registry/reclaim/retention"
	"github.com/reclaim-registry/reclaim/retention/pin"
)

// readJSON reads every body as collect's options are read: exact keys,
// each once, in every object of the body, one object and nothing after.
func TestReadJSONStrict(t *testing.T) {
	type inner struct {
		Name string `json:"name"`
	}
	type embedded struct {
		Flag bool `json:"flag"`
	}
	type body struct {
		embedded
		Items  []inner             `json:"items"`
		One    *inner              `json:"one"`
		Labels map[string]string   `json:"labels"`
		MinAge *retention.Duration `json:"min_age"`
		Pin    pin.Request         `json:"pin"`
		Skip   string              `json:"-"`
		Plain  int
	}
	for _, c := range []struct {
		body string
		ok   bool
	}{
		{``, true},
		{"  \n", true},
		{`{}`, true},
		{`{"flag":true,"items":[{"name":"a"},{"name":"b"}],"one":null,"labels":{"a":"1"},"min_age":"2h","Plain":1}`, true},
		{`{"pin":{"note":"x","expires_at":"2026-01-01T00:00:00Z"}}`, true},
		{`{"items":[],"labels":{},"one":{"name":"x"},"min_age":null,"Plain":-7}`, true},
		{`{"one":5}`, false},
		{`{"items":[5]}`, false},
		{`{"Plain":"1"}`, false},
		{`{"items":null}`, true},
		{`null`, false},
		{`[]`, false},
		{`{"flag":true,"flag":false}`, false},
		{`{"Flag":true}`, false},
		{`{"plain":1}`, false},
		{`{"Skip":"x"}`, false},
		{`{"-":"x"}`, false},
		{`{"items":[{"name":"a","name":"b"}]}`, false},
		{`{"items":[{"Name":"a"}]}`, false},
		{`{"one":{"nme":"a"}}`, false},
		{`{"labels":{"a":"1","a":"2"}}`, false},
		{`{"pin":{"note":"x","Note":"y"}}`, false},
		{`{"min_age":"soon"}`, false},
		{`{"items":{"name":"a"}}`, false},
		{`{"flag":true} {}`, false},
		{`{"flag":true`, false},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(c.body))
		var v body
		err := readJSON(r, maxBody, &v)
		if (err == nil) != c.ok || err != nil && !errors.Is(err, errBadRequest) {
			t.Errorf("%s: %v, want ok=%v", c.body, err, c.ok)
		}
		// What it decodes is what encoding/json decodes (it walks the
		// objects itself, as it reads).
		var want body
		if c.ok && strings.TrimSpace(c.body) != "" {
			if err := json.Unmarshal([]byte(c.body), &want); err != nil {
				t.Fatal(err)
			}
		}
		if c.ok && !reflect.DeepEqual(v, want) {
			t.Errorf("%s: decoded %+v, encoding/json %+v", c.body, v, want)
		}
	}
	var v body
	err := readJSON(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"items":[{"name":"a"},{"Name":"b"}]}`)), maxBody, &v)
	if err == nil || !strings.Contains(err.Error(), `body: items[1]: unknown field "Name"`) {
		t.Errorf("the error names where: %v", err)
	}
}
