package middleware

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sync"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"
	storagemiddleware "github.com/distribution/distribution/v3/registry/storage/driver/middleware"
	"github.com/distribution/distribution/v3/version"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/internal/config"
)

// The one process-wide binding. Distribution finds a storage middleware only
// by the name it was registered under, and gives its InitFunc nothing of
// ours: the app (as the context, which carries the configuration), the
// driver below and the options map. So Open binds each Env to the
// *configuration.Configuration it was built for, the middleware hands
// Distribution the Env bound to the app's configuration, and Close unbinds
// it. A process may hold several (tests run many registries); each finds
// its own.
var (
	bindMu sync.Mutex
	bound  = map[*configuration.Configuration]*Env{}
)

func init() {
	if err := storagemiddleware.Register(MiddlewareName, initMiddleware); err != nil {
		logrus.Errorf("reclaim: register storage middleware: %v", err)
	}
}

// Open builds the Env of conf, with options opts (config.Load of conf), on
// a storage driver of its own built the way Distribution builds the one
// below the middleware: config.storage, then the storage middlewares listed
// before reclaim. It binds the Env to conf, so the app Distribution builds
// from conf uses that very driver (initMiddleware).
func Open(ctx context.Context, conf *configuration.Configuration, opts config.Options) (*Env, error) {
	below, err := driverBelow(ctx, conf)
	if err != nil {
		return nil, err
	}
	e, err := NewEnv(ctx, below, opts)
	if err != nil {
		return nil, err
	}
	bindMu.Lock()
	taken := bound[conf] != nil
	if !taken {
		bound[conf], e.conf = e, conf
	}
	bindMu.Unlock()
	if taken {
		e.Close()
		return nil, errors.New("storage: an Env is open for this configuration already")
	}
	return e, nil
}

func unbind(e *Env) {
	bindMu.Lock()
	defer bindMu.Unlock()
	if e.conf != nil && bound[e.conf] == e {
		delete(bound, e.conf)
	}
}

// driverBelow creates the storage driver of conf and stacks the storage
// middlewares listed before reclaim on it, as handlers.NewApp does.
func driverBelow(ctx context.Context, conf *configuration.Configuration) (storagedriver.StorageDriver, error) {
	params := maps.Clone(conf.Storage.Parameters())
	if params == nil {
		params = configuration.Parameters{}
	}
	if params["useragent"] == "" {
		params["useragent"] = fmt.Sprintf("distribution/%s %s", version.Version(), runtime.Version())
	}
	d, err := factory.Create(ctx, conf.Storage.Type(), params)
	if err != nil {
		return nil, fmt.Errorf("storage: create %s driver: %w", conf.Storage.Type(), err)
	}
	for _, mw := range conf.Middleware["storage"] {
		if mw.Name == MiddlewareName {
			break
		}
		if d, err = storagemiddleware.Get(ctx, mw.Name, mw.Options, d); err != nil {
			return nil, fmt.Errorf("unable to configure storage middleware (%s): %v", mw.Name, err)
		}
	}
	return d, nil
}

// initMiddleware is the InitFunc Distribution calls for `name: reclaim`. It
// returns the wrapped driver of the Env bound to the app's configuration,
// which sits on Open's own copy of the stack Distribution passes as below:
// so Distribution's requests, GC and the referrers index use one driver
// instance. (Distribution keeps its copy for its upload purger only.)
func initMiddleware(ctx context.Context, below storagedriver.StorageDriver, _ map[string]any) (storagedriver.StorageDriver, error) {
	app, ok := ctx.(*handlers.App)
	if !ok || app.Config == nil {
		return nil, errors.New("storage: the reclaim middleware runs only inside Distribution's app")
	}
	if !config.Enabled(app.Config) {
		return below, nil // `disabled: true`: Distribution applies the entry anyway
	}
	bindMu.Lock()
	e := bound[app.Config]
	bindMu.Unlock()
	if e != nil {
		return e.Driver, nil
	}
	if _, _, err := config.Load(app.Config); err != nil {
		return nil, err
	}
	return nil, errors.New("storage: no reclaim Env is open for this configuration: registry.New opens it before Distribution builds its app")
}
