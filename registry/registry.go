// Package registry is Reclaim's server around Distribution's app: the
// Server, which owns everything Reclaim builds from one configuration, and
// the HTTP features it composes (the referrers API, the sha256 check, the
// console's glue). The GC API is registry/gcapi, where an error becomes an
// HTTP status (its errors.go); the access controller is
// registry/accesscontrol.
//
// wire.go builds the whole graph: New decodes the options once and opens
// the storage Env, the collector, the retention stores, the reclaimer when
// enabled and the referrers backend; Handler composes the GC API, the
// console and the referrers API around Distribution's app. Start runs the
// background reclaimer and Close stops everything.
package registry

import (
	"context"
	"sync"

	"github.com/distribution/distribution/v3/configuration"
	registrymiddleware "github.com/distribution/distribution/v3/registry/middleware/registry"

	"github.com/reclaim-registry/reclaim/gc/reclaimer"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/reclaim"
	"github.com/reclaim-registry/reclaim/registry/accesscontrol"
	"github.com/reclaim-registry/reclaim/registry/gcapi"
	"github.com/reclaim-registry/reclaim/storage/middleware"
	"github.com/reclaim-registry/reclaim/trash"
)

// The blob descriptor wrapper (middleware.DescriptorServiceFactory) sees every
// blob Stat, cache hits included: without it a HEAD answers 200 for a
// collected blob and a re-push skips the upload, leaving a broken image.
// Distribution has registry options only process-wide; the wrapper serves
// the Env whose request scope a request carries, and nothing otherwise.
func init() {
	if err := registrymiddleware.RegisterOptions(middleware.RegistryOption()); err != nil {
		panic(err)
	}
}

// Server is one registry's Reclaim: built once by New, stopped by Close.
type Server struct {
	conf   *configuration.Configuration
	opts   config.Options
	on     bool            // the reclaim middleware is configured
	env    *middleware.Env // nil unless on
	access *accesscontrol.Control
	// gc is the collector and what the GC API serves from (wire.go); nil
	// unless on, and on a pull-through cache.
	gc        *gcapi.Config
	reclaimer *reclaimer.Reclaimer // nil unless reclaimer.enabled
	referrers *referrersBackend
	// deletions sends what GC, the reclaimer and retention delete to the
	// notifications endpoints; nil without one (wire.go).
	deletions reclaim.DeletionSink
	// trash holds what GC, the reclaimer and retention remove while
	// trash.keep > 0 (wire.go); nil when it is off.
	trash *trash.Bin

	base      context.Context // New's context, without its cancellation
	mu        sync.Mutex
	stop      context.CancelFunc // of the running reclaimer
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Trash is the trash, nil while trash.keep is 0.
func (s *Server) Trash() *trash.Bin { return s.trash }

// Env is the storage Env, nil without the reclaim middleware.
func (s *Server) Env() *middleware.Env { return s.env }

// Close stops the reclaimer and closes the storage Env (its Redis clients
// and the binding to the configuration).
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		if s.stop != nil {
			s.stop()
			metricReclaimerEnabled.Set(0)
		}
		s.mu.Unlock()
		s.wg.Wait()
		if s.env != nil {
			s.env.Close()
		}
	})
	return nil
}
