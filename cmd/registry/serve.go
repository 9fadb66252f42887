package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	distregistry "github.com/distribution/distribution/v3/registry"
	"github.com/distribution/distribution/v3/version"
	"github.com/docker/go-metrics"
	"github.com/google/uuid"
	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/reclaim-registry/reclaim/registry"
)

// `registry serve <config>` is upstream's serve with Reclaim built first:
// it parses the configuration once, builds the Reclaim server for it
// (registry.New: options, storage Env, collector, reclaimer, referrers),
// hands Distribution the server's handler, builds Distribution's registry
// from the same configuration (whose reclaim storage middleware finds the
// server's Env by that configuration), sets the HTTP server's timeouts
// (httpserver.go), starts the background reclaimer, serves until SIGINT or
// SIGTERM, and closes the server.
//
// A bad reclaim option stops it before Distribution builds anything, with
// exit status 1 and one line naming the option; Distribution would panic
// with a stack trace when a storage middleware refused its options.

// serveExit is os.Exit, replaced by tests.
var serveExit = os.Exit

func init() {
	distregistry.RootCmd.RemoveCommand(distregistry.ServeCmd)
	distregistry.RootCmd.AddCommand(&cobra.Command{
		Use:   distregistry.ServeCmd.Use,
		Short: distregistry.ServeCmd.Short,
		Long:  distregistry.ServeCmd.Long,
		Run:   func(cmd *cobra.Command, args []string) { serveExit(runServe(cmd, args)) },
	})
}

func runServe(cmd *cobra.Command, args []string) int {
	conf, err := readConfig(configPath(args))
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "configuration error: %v\n", err)
		cmd.Usage() //nolint:errcheck
		return 1
	}
	configureLogging(conf)
	ctx := serveContext(conf)
	srv, err := registry.New(ctx, conf)
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "registry: %s\n", oneLine(err))
		return 1
	}
	defer srv.Close()
	distregistry.RegisterHandler(func(_ *configuration.Configuration, app http.Handler) http.Handler {
		return srv.Handler(app)
	})
	reg, err := distregistry.NewRegistry(ctx, conf)
	if err != nil {
		logrus.StandardLogger().Logln(logrus.FatalLevel, err)
		return 1
	}
	hs, err := httpServer(reg)
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "registry: %v\n", err)
		return 1
	}
	srv.ConfigureHTTPServer(hs)
	srv.Start()
	configureDebugServer(conf)
	if err := reg.ListenAndServe(); err != nil {
		logrus.StandardLogger().Logln(logrus.FatalLevel, err)
		return 1
	}
	return 0
}

// serveContext is the context upstream's serve starts from: every log line
// of Distribution's carries the process's instance id and the version.
// Upstream sets both with helpers internal to Distribution; the instance id
// is a plain context value, and the version goes through log.fields, which
// Distribution adds to that same logger.
func serveContext(conf *configuration.Configuration) context.Context {
	if conf.Log.Fields == nil {
		conf.Log.Fields = map[string]any{}
	}
	if _, ok := conf.Log.Fields["version"]; !ok {
		conf.Log.Fields["version"] = version.Version()
	}
	return instanceContext{Context: context.Background(), id: uuid.Must(uuid.NewV7()).String()}
}

type instanceContext struct {
	context.Context
	id string
}

func (c instanceContext) Value(key any) any {
	if key == "instance.id" {
		return c.id
	}
	return c.Context.Value(key)
}

// configureLogging applies log.level and log.formatter before registry.New
// logs; Distribution's NewRegistry applies them again (and reports a bad
// one).
func configureLogging(conf *configuration.Configuration) {
	if l, err := logrus.ParseLevel(string(conf.Log.Level)); err == nil {
		logrus.SetLevel(l)
	}
	logrus.SetReportCaller(conf.Log.ReportCaller)
	switch conf.Log.Formatter {
	case "", "text":
		logrus.SetFormatter(&logrus.TextFormatter{TimestampFormat: time.RFC3339Nano})
	case "json":
		logrus.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano, DisableHTMLEscape: true})
	case "logstash":
		logrus.SetFormatter(&logrus.JSONFormatter{TimestampFormat: time.RFC3339Nano,
			FieldMap: logrus.FieldMap{logrus.FieldKeyFunc: "function"}})
	}
}

// configureDebugServer is upstream's: http.debug.addr serves the default
// mux (pprof, expvar) and, when enabled, Prometheus metrics.
func configureDebugServer(conf *configuration.Configuration) {
	addr := conf.HTTP.Debug.Addr
	if addr == "" {
		return
	}
	go func() {
		logrus.Infof("debug server listening %v", addr)
		if err := http.ListenAndServe(addr, nil); err != nil {
			logrus.Fatalf("error listening on debug interface: %v", err)
		}
	}()
	if p := conf.HTTP.Debug.Prometheus; p.Enabled {
		path := p.Path
		if path == "" {
			path = "/metrics"
		}
		logrus.Info("providing prometheus metrics on ", path)
		http.Handle(path, metrics.Handler())
	}
}
