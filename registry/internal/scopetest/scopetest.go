// Package scopetest is an access controller for tests, registered as
// "gcscopetest": it grants exactly the scopes a request lists in its
// X-Scopes header ("repository:<name>:<action>,..."), like a token whose
// claims carry those scopes, and refuses anything else with a Bearer
// challenge naming the scope it wanted. The GC API's and the console's
// tests import it for its registration.
package scopetest

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/distribution/distribution/v3/registry/auth"
)

// Name is the name the controller is registered under (config.yml auth:).
const Name = "gcscopetest"

type controller struct{}

type challenge struct{ msg string }

func (c challenge) Error() string { return c.msg }
func (c challenge) SetHeaders(r *http.Request, w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="test",scope="`+c.msg+`"`)
}

func (controller) Authorized(r *http.Request, access ...auth.Access) (*auth.Grant, error) {
	granted := r.Header.Get("X-Scopes")
	if granted == "" {
		return nil, challenge{"no token"}
	}
	for _, a := range access {
		want := fmt.Sprintf("%s:%s:%s", a.Type, a.Name, a.Action)
		if !strings.Contains(","+granted+",", ","+want+",") {
			return nil, challenge{want}
		}
	}
	return &auth.Grant{}, nil
}

func init() {
	_ = auth.Register(Name, func(map[string]any) (auth.AccessController, error) { return controller{}, nil })
}
