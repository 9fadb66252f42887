package registry

import (
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/distribution/distribution/v3/registry/auth"
)

// The console tests' access controller, as the GC API's unit tests have it
// (registry/gcapi/auth_test.go).

// scopeController grants exactly the scopes listed in the request's
// X-Scopes header ("repository:<name>:<action>,..."), like a token whose
// claims carry those scopes, and records what the handler asked for.
type scopeController struct {
	mu    sync.Mutex
	asked []string
}

type challenge struct{ msg string }

func (c challenge) Error() string { return c.msg }
func (c challenge) SetHeaders(r *http.Request, w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="test",scope="`+c.msg+`"`)
}

var scopes = &scopeController{}

func (s *scopeController) Authorized(r *http.Request, access ...auth.Access) (*auth.Grant, error) {
	granted := r.Header.Get("X-Scopes")
	if granted == "" {
		return nil, challenge{"no token"}
	}
	for _, a := range access {
		want := fmt.Sprintf("%s:%s:%s", a.Type, a.Name, a.Action)
		s.mu.Lock()
		s.asked = append(s.asked, want)
		s.mu.Unlock()
		if !strings.Contains(","+granted+",", ","+want+",") {
			return nil, challenge{want}
		}
	}
	return &auth.Grant{}, nil
}

func init() {
	_ = auth.Register("gcscopetest", func(map[string]any) (auth.AccessController, error) { return scopes, nil })
}
