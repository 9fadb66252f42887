// Package crosssite tells the requests a browser sends for another site's
// page from the ones the registry's own pages, or a client that is not a
// browser, send.
//
// A browser attaches the registry's credentials (cached basic auth, a
// cookie) to every request it sends there, whichever page asked: an empty
// HTML form on another site, method=post, pointed at a registry URL, sends a
// request the registry cannot tell from its operator's by the credentials
// alone. What tells them apart is what a browser adds and a page cannot
// forge:
//
//   - Sec-Fetch-Site (every current browser): "same-origin" or "none" (the
//     user typed the URL) is the registry's own; "same-site" and
//     "cross-site" are another page's. It is decisive when present: the
//     browser knows the URL it sent to, where the registry behind a proxy
//     may not know its own origin.
//   - Origin (older browsers send it without Sec-Fetch-Site): anything but
//     the registry's own scheme and host is another page's; "null" (a
//     sandboxed frame, a data: URL) too.
//   - Content-Type: a form, or a fetch that needs no CORS preflight, can
//     send only application/x-www-form-urlencoded, multipart/form-data and
//     text/plain. An API that takes JSON refuses them (Form).
//
// A request with none of these headers did not come from a browser (curl,
// Distribution's clients, the registry CLI): Origin passes it.
package crosssite

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	v2 "github.com/distribution/distribution/v3/registry/api/v2"
)

// ErrRefused matches every refusal (errors.Is).
var ErrRefused = errors.New("cross-site request refused")

// Origin returns nil for a request the registry's own pages, or no browser,
// sent, and an error wrapping ErrRefused, naming the header, for one a
// browser sent for another site's page.
func Origin(r *http.Request) error {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		if s == "same-origin" || s == "none" {
			return nil
		}
		return fmt.Errorf("%w: Sec-Fetch-Site: %s: the browser sent it for another site's page", ErrRefused, s)
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return nil
	}
	// "null" and anything else that is not an origin normalize to "".
	if n, own := normalize(o), ownOrigin(r); n == "" || n != own {
		return fmt.Errorf("%w: Origin: %s is not the registry's own origin %s", ErrRefused, o, own)
	}
	return nil
}

// Form returns an error wrapping ErrRefused when the request's Content-Type
// is one a browser sends cross-site without asking first (a form's, or a
// no-cors fetch's). An API whose bodies are JSON calls it for every request
// that changes state; no Content-Type passes.
func Form(r *http.Request) error {
	ct := r.Header.Get("Content-Type")
	// The media type without parameters, as the Fetch standard reads it; a
	// Content-Type that does not parse is compared the same way, so
	// "text/plain;;" is text/plain (fail closed).
	essence, _, _ := strings.Cut(ct, ";")
	switch strings.ToLower(strings.TrimSpace(essence)) {
	case "application/x-www-form-urlencoded", "multipart/form-data", "text/plain":
		return fmt.Errorf("%w: Content-Type: %s is what a browser form sends; send JSON as application/json, or no body",
			ErrRefused, ct)
	}
	return nil
}

// ownOrigin is the registry's origin for r as Distribution writes it into
// its Location headers: the request's scheme and Host, or what a proxy's
// Forwarded (X-Forwarded-Proto, X-Forwarded-Host) headers say they were.
// A page cannot set those headers on a cross-site request.
func ownOrigin(r *http.Request) string {
	base, err := v2.NewURLBuilderFromRequest(r, false).BuildBaseURL()
	if err != nil {
		return ""
	}
	u, err := url.Parse(base) // scheme://host/v2/
	if err != nil {
		return ""
	}
	return normalize(u.Scheme + "://" + u.Host)
}

// normalize is origin o as scheme://host in lower case without the
// scheme's default port, or "" when o is not such an origin ("null").
func normalize(o string) string {
	u, err := url.Parse(o)
	if err != nil || u.Scheme == "" || u.Host == "" || u.Path != "" || u.User != nil {
		return ""
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if port := u.Port(); scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		host = strings.TrimSuffix(host, ":"+port)
	}
	return scheme + "://" + host
}
