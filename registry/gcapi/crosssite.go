package gcapi

import (
	"net/http"
	"strings"

	"github.com/reclaim-registry/reclaim/internal/crosssite"
)

// CrossSiteGuard refuses, with 403 CROSS_SITE_REQUEST, every request under
// /gc/v1/ that may change state (any method but GET, HEAD and OPTIONS) and
// that a browser sent for another site's page. The browser attaches the
// registry's cached credentials to it, so without this guard an empty HTML
// form elsewhere, method=post, runs a real collect. Refused:
//
//   - Sec-Fetch-Site other than same-origin or none, or, from a browser
//     that sends no Sec-Fetch-Site, an Origin that is not the registry's
//     own ("null" included): crosssite.Origin, which the console's preview
//     asks too;
//   - a Content-Type a form sends (urlencoded, multipart, text/plain): the
//     API takes JSON, and only these types cross sites without a CORS
//     preflight, which the registry never grants.
//
// Curl, the registry CLI and Distribution's clients send no Origin and no
// Sec-Fetch-*; with a JSON body, or none, they pass unchanged.
func CrossSiteGuard(next http.Handler) http.Handler { return crossSiteGuard{next: next} }

type crossSiteGuard struct{ next http.Handler }

func (g crossSiteGuard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, gcPrefix) && changesState(r.Method) {
		err := crosssite.Origin(r)
		if err == nil {
			err = crosssite.Form(r)
		}
		if err != nil {
			WriteError(w, r, err)
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

// changesState: every method but the safe ones (RFC 9110 9.2.1) may.
func changesState(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}
