// Package registry is Reclaim's HTTP layer: the GC API, the referrers API,
// status and metrics, around Distribution's app. It is the only package
// that turns Reclaim's errors into HTTP status codes.
//
// A Server is everything Reclaim builds from one configuration: the
// options (decoded once), the storage Env, the collector, the reclaimer,
// the referrers backend and the access controller. New builds it, Handler
// composes its handlers around Distribution's app, Start runs the
// background reclaimer and Close stops everything.
package registry

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/distribution/distribution/v3/configuration"
	registrymiddleware "github.com/distribution/distribution/v3/registry/middleware/registry"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"

	"github.com/reclaim-registry/reclaim/gc/reclaimer"
	"github.com/reclaim-registry/reclaim/internal/config"
	"github.com/reclaim-registry/reclaim/storage/middleware"
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
	access *accessControl
	// gc is the collector and what the GC API reports about it; nil unless
	// on, and on a pull-through cache.
	gc        *gcBackend
	reclaimer *reclaimer.Reclaimer // nil unless reclaimer.enabled
	referrers *referrersBackend

	base      context.Context // New's context, without its cancellation
	mu        sync.Mutex
	stop      context.CancelFunc // of the running reclaimer
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// openDriver creates the storage driver the referrers index uses when the
// reclaim middleware is not configured (with it, the Env's raw driver).
var openDriver = func(ctx context.Context, conf *configuration.Configuration) (storagedriver.StorageDriver, error) {
	params := conf.Storage.Parameters()
	if params == nil {
		params = configuration.Parameters{}
	}
	return factory.Create(ctx, conf.Storage.Type(), params)
}

// New builds the Server of conf. With the reclaim middleware configured it
// opens the storage Env (bound to conf, so the app Distribution builds from
// conf afterwards stores through it), the collector, and the reclaimer when
// enabled; the background reclaimer waits for Start. A bad option is an
// error naming it (config.OptionError).
func New(ctx context.Context, conf *configuration.Configuration) (*Server, error) {
	opts, on, err := config.Load(conf)
	if err != nil {
		return nil, err
	}
	s := &Server{conf: conf, opts: opts, on: on, access: newAccessControl(conf), base: context.WithoutCancel(ctx)}
	if err := s.open(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Server) open(ctx context.Context) error {
	if !s.on {
		d, err := openDriver(ctx, s.conf)
		if err != nil {
			return fmt.Errorf("open storage for the referrers index: %w", err)
		}
		s.referrers = backendFromDriver(d)
		return nil
	}
	env, err := middleware.Open(ctx, s.conf, s.opts)
	if err != nil {
		return err
	}
	s.env, s.referrers = env, backendFromDriver(env.Raw)
	if s.conf.Proxy.RemoteURL != "" {
		return nil // manifests are stored unverified: no collector (config.ErrProxyGC)
	}
	if s.gc, err = newGCBackend(env, s.opts); err != nil {
		return err
	}
	if s.opts.Reclaimer.Enabled {
		s.reclaimer, err = s.NewReclaimer(true)
	}
	return err
}

// Handler composes Reclaim's HTTP features around Distribution's app. A
// request meets them in this order:
//
//	readiness    GET /readyz: ok while Redis answers and is trusted, unauthenticated (ready.go)
//	body idle    a request body that sends nothing for bodyidletimeout ends the request (httptimeouts.go)
//	console      /gc/console/: the operator console's pages (console.go)
//	cross-site   refuses a /gc/v1/ write a browser sent for another site's page (gcapi_crosssite.go)
//	referrers    GET /v2/<name>/referrers/<digest>; index upkeep on manifest PUT and DELETE
//	scope        the request scope the middleware records into; a refused write answers 503
//	GC API       /gc/v1/...: one route table (gcapi_routes.go), GET /gc/v1/status included
//	sha256 only  refuses a link under another digest algorithm before Distribution sees it
//	app          Distribution
//
// scope and sha256 only are there when the reclaim middleware is.
func (s *Server) Handler(app http.Handler) http.Handler {
	h := app
	if s.on {
		h = sha256Only(h)
	}
	api := newGCAPI(s.access, s.opts, s.gc, h)
	api.statusPage = &statusHandler{access: s.access, api: api, env: s.env, reclaimer: s.reclaimer}
	h = api
	if s.on {
		h = s.env.Handler(h)
	}
	h = newReferrersHandler(s.conf, s.referrers, s.access, h)
	return readiness(s.env, bodyIdle(s.HTTP().BodyIdleTimeout, s.newConsole(api, crossSiteGuard{next: h})))
}

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
