package main

import (
	"errors"
	"net/http"
	"reflect"

	distregistry "github.com/distribution/distribution/v3/registry"
)

// errNoHTTPServer: Distribution's Registry no longer keeps its *http.Server
// where httpServer looks (a new upstream version). serve refuses to start
// rather than serve without timeouts.
var errNoHTTPServer = errors.New("cannot set the HTTP server's timeouts: distribution's Registry has no *http.Server field \"server\" (upstream changed)")

// httpServer is the *http.Server reg serves with. Upstream builds it in
// NewRegistry with no timeouts, and neither its configuration nor its API
// offers a way to set any; ListenAndServe (TLS, Let's Encrypt, client CAs,
// socket activation, the drain on SIGTERM) serves it. Rather than fork
// ListenAndServe, serve reaches the server it built and sets the timeouts
// before it serves. The field is checked by name and type here, and
// TestServeTimeouts runs the real binary.
func httpServer(reg *distregistry.Registry) (*http.Server, error) {
	f := reflect.ValueOf(reg).Elem().FieldByName("server")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*http.Server]() || f.IsNil() {
		return nil, errNoHTTPServer
	}
	return (*http.Server)(f.UnsafePointer()), nil
}
