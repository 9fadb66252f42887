// Package registry is Reclaim's HTTP layer: the GC API, the referrers API,
// status and metrics, wired into Distribution's app through its extension
// points (handler middleware and registry options). It is the only package
// that turns Reclaim's errors into HTTP status codes.
package registry

import (
	"net/http"
	"sync"

	"github.com/distribution/distribution/v3/configuration"
	distregistry "github.com/distribution/distribution/v3/registry"
)

// HandlerFunc wraps the registry's HTTP handler. Each Reclaim feature that
// serves HTTP registers one with register from its own file's init.
type HandlerFunc func(config *configuration.Configuration, next http.Handler) http.Handler

var (
	mu       sync.Mutex
	wrappers []HandlerFunc
)

func register(h HandlerFunc) {
	mu.Lock()
	defer mu.Unlock()
	wrappers = append(wrappers, h)
}

// Wrap applies every Reclaim HTTP handler to next, in registration order.
// The serve command gets it through Distribution's RegisterHandler; tests that
// build the app in-process call it directly.
func Wrap(config *configuration.Configuration, next http.Handler) http.Handler {
	mu.Lock()
	defer mu.Unlock()
	h := next
	for _, w := range wrappers {
		h = w(config, h)
	}
	return h
}

func init() {
	distregistry.RegisterHandler(Wrap)
}
