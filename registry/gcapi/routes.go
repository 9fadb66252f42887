package gcapi

import (
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// route is one endpoint of the GC API: a method and a pattern to its
// handler, with the access it needs. routes holds every endpoint under
// /gc/v1/; docs/api.md and docs/openapi.yaml document the same set
// (TestRoutesMatchOpenAPI).
type route struct {
	// path is the endpoint as docs/openapi.yaml writes it ("" for a rule
	// that serves nothing).
	path string
	// methods are the methods it serves.
	methods []string
	// pattern is matched against the path after /gc/v1/; its groups are
	// the handler's arguments.
	pattern *regexp.Regexp
	// pass lists methods whose requests go on to the next route.
	pass []string
	// others says what happens to a request of any other method.
	others others
	// scope is the access a caller needs (registry/accesscontrol checks it).
	scope string
	// always: served while the GC API is disabled.
	always bool
	serve  func(h *API, w http.ResponseWriter, r *http.Request, m []string) error
}

// others is what a route does with a method it does not serve.
type others int

const (
	// refuse answers 405 ("use <methods>") before anything else.
	refuse others = iota
	// handler hands it to the handler, which refuses it after its own
	// checks (the name, the caller's access), as a served method would be.
	handler
)

var (
	get        = []string{http.MethodGet}
	post       = []string{http.MethodPost}
	getPutDel  = []string{http.MethodGet, http.MethodPut, http.MethodDelete}
	putDelete  = []string{http.MethodPut, http.MethodDelete}
	repoPrefix = "^repositories/"
)

// routes is the GC API, tried in order: the first route whose pattern
// matches and that does not pass the method on takes the request; none
// is 404. Repository names hold '/', so the order settles which route a
// path like "x/pins/usage" is: every name N reaches N/usage (GET), then
// the retention routes, then the pins (not POST), then anything else under
// repositories/ is POST only.
var routes = []route{
	{path: "/gc/v1/status", methods: get, pattern: regexp.MustCompile(`^status$`), scope: "authenticated", always: true,
		serve: func(h *API, w http.ResponseWriter, r *http.Request, _ []string) error {
			return h.statusPage.serve(w, r)
		}},
	{path: "/gc/v1/runs/{id}", methods: get, pattern: regexp.MustCompile(`(?s)^runs/(.*)$`), scope: "pull on the run's repository",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, m []string) error { return h.getRun(w, r, m[1]) }},
	{path: "/gc/v1/plans/{id}", methods: get, pattern: regexp.MustCompile(`(?s)^plans/(.*)$`), scope: "pull on the plan's repository",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, m []string) error { return h.getPlan(w, r, m[1]) }},
	{path: "/gc/v1/inuse/sources", methods: get, pattern: regexp.MustCompile(`^inuse/sources/?$`), others: handler, scope: "catalog",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, _ []string) error { return h.inuse(w, r, "") }},
	{path: "/gc/v1/inuse/sources/{source}", methods: getPutDel, pattern: regexp.MustCompile(`(?s)^inuse/sources/(.+)$`), others: handler,
		scope: "catalog (GET), registry:inuse:write (PUT, DELETE)",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, m []string) error { return h.inuse(w, r, m[1]) }},
	{path: "/gc/v1/retention/plans", methods: get, pattern: regexp.MustCompile(`^retention/plans$`), scope: "catalog",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, _ []string) error { return h.allPlans(w, r) }},
	{path: "/gc/v1/trash", methods: get, pattern: regexp.MustCompile(`^trash$`), scope: "pull on repository=, else catalog",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, _ []string) error { return h.trashList(w, r) }},
	{path: "/gc/v1/trash/restore", methods: post, pattern: regexp.MustCompile(`^trash/restore$`), scope: "delete on every repository restored",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, _ []string) error { return h.trashRestore(w, r) }},
	{path: "/gc/v1/trash/purge", methods: post, pattern: regexp.MustCompile(`^trash/purge$`), scope: "registry:trash:purge",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, _ []string) error { return h.trashPurge(w, r) }},
	{path: "/gc/v1/usage", methods: get, pattern: regexp.MustCompile(`^usage$`), scope: "catalog",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, _ []string) error { return h.topUsage(w, r) }},
	{path: "/gc/v1/repositories/{name}/usage", methods: get, pattern: regexp.MustCompile(`(?s)` + repoPrefix + `(.*)/usage$`), pass: putDelete,
		scope: "pull; delete with refresh=true",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, m []string) error {
			return h.repoUsage(w, r, m[1])
		}},
	retentionRoute("/gc/v1/repositories/{name}/retention/preview", post, `/retention/preview$`, "preview", "delete"),
	retentionRoute("/gc/v1/repositories/{name}/retention/plans", get, `/retention/plans$`, "plans", "pull"),
	retentionRoute("/gc/v1/repositories/{name}/retention/plans/{id}", get, `/retention/plans/([^/]+)$`, "plan", "pull"),
	retentionRoute("/gc/v1/repositories/{name}/retention/plans/{id}/apply", post, `/retention/plans/([^/]+)/apply$`, "apply", "delete"),
	// One pin before the list: of "x/pins/pins" it is the pin "pins" of x;
	// the pins of a repository named "x/pins" are listed at x/pins/pins/.
	pinsRoute("/gc/v1/repositories/{name}/pins/{ref}", getPutDel, `(.+?)/pins/([^/]*)$`),
	pinsRoute("/gc/v1/repositories/{name}/pins", get, `(.+?)/pins()$`),
	// A ref with a ':' and a '/' ("sha256:../x") can only be a malformed
	// digest (no repository name holds a ':'): 400 DIGEST_INVALID, not a
	// repository path without an action.
	pinsRoute("/gc/v1/repositories/{name}/pins/{ref}", getPutDel, `(.+)/pins/([^/]*:.*)$`),
	// Everything else under repositories/ is POST only.
	{methods: post, pattern: regexp.MustCompile(repoPrefix), pass: post},
	{path: "/gc/v1/repositories/{name}/collect", methods: post, pattern: regexp.MustCompile(`(?s)` + repoPrefix + `(.*)/collect$`), scope: "delete",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, m []string) error {
			return h.collect(w, r, m[1], "")
		}},
	{path: "/gc/v1/repositories/{name}/plan", methods: post, pattern: regexp.MustCompile(`(?s)` + repoPrefix + `(.*)/plan$`), scope: "delete",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, m []string) error { return h.plan(w, r, m[1]) }},
	{path: "/gc/v1/repositories/{name}/plans/{id}/apply", methods: post, pattern: regexp.MustCompile(repoPrefix + `(.+)/plans/([^/]+)/apply$`), scope: "delete",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, m []string) error {
			return h.collect(w, r, m[1], m[2])
		}},
}

// retentionRoute is one of a repository's retention endpoints (the name is
// everything before the last "/retention/"); the handler checks the name
// before the method.
func retentionRoute(path string, methods []string, suffix, what, action string) route {
	return route{path: path, methods: methods, pattern: regexp.MustCompile(repoPrefix + `(.+)` + suffix), others: handler, scope: action,
		serve: func(h *API, w http.ResponseWriter, r *http.Request, m []string) error {
			id := ""
			if len(m) > 2 {
				id = m[2]
			}
			return h.retention(w, r, m[1], what, id)
		}}
}

// pinsRoute is a pins endpoint: a POST goes on to the collection routes,
// and the handler checks the name and access before other methods.
func pinsRoute(path string, methods []string, pattern string) route {
	return route{path: path, methods: methods, pattern: regexp.MustCompile(repoPrefix + pattern), pass: post, others: handler,
		scope: "pull (GET), delete (PUT, DELETE)",
		serve: func(h *API, w http.ResponseWriter, r *http.Request, m []string) error {
			return h.pins(w, r, m[1], m[2])
		}}
}

// match finds the route of a request: its route and the pattern's groups,
// or the route and a 405 for a method it refuses, or a 404.
func match(method, path string) (*route, []string, error) {
	rest := strings.TrimPrefix(path, gcPrefix)
	for i := range routes {
		rt := &routes[i]
		m := rt.pattern.FindStringSubmatch(rest)
		if m == nil || slices.Contains(rt.pass, method) {
			continue
		}
		if slices.Contains(rt.methods, method) || rt.others == handler {
			return rt, m, nil
		}
		return rt, nil, fmt.Errorf("%w: %s; use %s", errMethod, method, strings.Join(rt.methods, ", "))
	}
	return nil, nil, fmt.Errorf("%w: %s", errNotFound, path)
}
