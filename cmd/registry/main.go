// Command registry is Reclaim's drop-in replacement for the CNCF
// Distribution registry binary. It keeps upstream's CLI (serve,
// garbage-collect, --version) and config.yml, compiles in every upstream
// storage driver, auth provider and storage middleware, and adds Reclaim's
// own subcommands and middleware. serve is its own (serve.go): it builds
// the Reclaim server before Distribution's registry and closes it after.
package main

import (
	_ "net/http/pprof"
	"os"

	distregistry "github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/auth/silly"
	_ "github.com/distribution/distribution/v3/registry/auth/token"
	_ "github.com/distribution/distribution/v3/registry/proxy"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/azure"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/gcs"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/middleware/cloudfront"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/middleware/redirect"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/middleware/rewrite"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/s3-aws"
)

func main() {
	quietTelemetry()
	root := distregistry.RootCmd
	root.Short = "Reclaim: a Distribution registry with online garbage collection"
	root.Long = root.Short
	root.SilenceUsage = true
	if err := root.Execute(); err != nil {
		os.Exit(1)
	}
}

// quietTelemetry turns OpenTelemetry trace export off unless the operator
// configured it. Upstream's autoexport defaults to an OTLP exporter on
// localhost:4318 and logs an error for every failed batch when nothing
// listens there.
func quietTelemetry() {
	for _, k := range []string{
		"OTEL_TRACES_EXPORTER",
		"OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
	} {
		if os.Getenv(k) != "" {
			return
		}
	}
	os.Setenv("OTEL_TRACES_EXPORTER", "none")
}
