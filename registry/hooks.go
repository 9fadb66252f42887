package registry

import (
	"net/http"

	"github.com/distribution/distribution/v3/configuration"
	registrymiddleware "github.com/distribution/distribution/v3/registry/middleware/registry"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/storage"
)

// The storage middleware alone cannot see everything the link database
// needs, so two registry-level hooks complete it:
//
//   - Distribution's blob descriptor cache answers a blob HEAD without any
//     driver call. storage.RegistryOption wraps every per-repository blob
//     statter outside that cache, so those accesses are recorded, fences
//     are honoured and stale entries of deleted blobs stop answering. It is
//     a no-op while the reclaim middleware is not configured.
//   - storage.Handler gives each request the scope the middleware uses and
//     turns a refused write (a fence, or Redis down) into 503 with
//     Retry-After, which clients retry.
func init() {
	if err := registrymiddleware.RegisterOptions(storage.RegistryOption()); err != nil {
		logrus.Errorf("reclaim: register blob descriptor hook: %v", err)
	}
	register(storageHandler)
}

func storageHandler(config *configuration.Configuration, next http.Handler) http.Handler {
	for _, m := range config.Middleware["storage"] {
		if m.Name == storage.MiddlewareName && !m.Disabled {
			return storage.Handler(next)
		}
	}
	return next
}
