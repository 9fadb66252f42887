package crosssite

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestOrigin(t *testing.T) {
	for _, c := range []struct {
		name   string
		tls    bool
		header map[string]string
		ok     bool
	}{
		{"no browser headers (curl, the CLI, Distribution's clients)", false, nil, true},
		{"same-origin", false, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://registry.example"}, true},
		{"typed by the user", false, map[string]string{"Sec-Fetch-Site": "none"}, true},
		{"cross-site form (Chromium)", false, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, false},
		{"same-site sibling", false, map[string]string{"Sec-Fetch-Site": "same-site", "Origin": "http://other.registry.example"}, false},
		{"unknown Sec-Fetch-Site", false, map[string]string{"Sec-Fetch-Site": "cross-origin"}, false},
		{"Origin only, own", false, map[string]string{"Origin": "http://registry.example"}, true},
		{"Origin only, own, upper case and default port", false, map[string]string{"Origin": "HTTP://Registry.Example:80"}, true},
		{"Origin only, other host", false, map[string]string{"Origin": "http://evil.example"}, false},
		{"Origin only, other port", false, map[string]string{"Origin": "http://registry.example:8080"}, false},
		{"Origin only, other scheme", false, map[string]string{"Origin": "https://registry.example"}, false},
		{"Origin only, TLS", true, map[string]string{"Origin": "https://registry.example"}, true},
		{"Origin only, behind a TLS proxy", false, map[string]string{"Origin": "https://registry.example", "X-Forwarded-Proto": "https"}, true},
		{"Origin null", false, map[string]string{"Origin": "null"}, false},
		{"Origin with a path", false, map[string]string{"Origin": "http://registry.example/x"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "http://registry.example/gc/v1/x", nil)
			if c.tls {
				r.TLS = &tls.ConnectionState{}
			}
			for k, v := range c.header {
				r.Header.Set(k, v)
			}
			err := Origin(r)
			if (err == nil) != c.ok || err != nil && !errors.Is(err, ErrRefused) {
				t.Fatalf("Origin: %v, want ok=%v", err, c.ok)
			}
		})
	}
}

func TestForm(t *testing.T) {
	for ct, ok := range map[string]bool{
		"":                                  true,
		"application/json":                  true,
		"application/json; charset=utf-8":   true,
		"application/x-www-form-urlencoded": false,
		"multipart/form-data; boundary=x":   false,
		"text/plain;charset=UTF-8":          false,
		" Text/Plain ":                      false,
		"text/plain;;":                      false,
	} {
		r := httptest.NewRequest(http.MethodPost, "http://registry.example/gc/v1/x", nil)
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		if err := Form(r); (err == nil) != ok || err != nil && !errors.Is(err, ErrRefused) {
			t.Errorf("Content-Type %q: %v, want ok=%v", ct, err, ok)
		}
	}
}
