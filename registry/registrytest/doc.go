// Package registrytest starts real Reclaim registries for tests and drives
// them with go-containerregistry, the way a client would.
//
// Two ways to start a registry, both with a per-test filesystem root and both
// stopped by t.Cleanup:
//
//   - Start builds the Reclaim server (registry.New) and Distribution's
//     handlers.App in this process, as `serve` does, and serves the server's
//     Handler around the app with httptest; Registry.Server is that server.
//     It is fast, needs no build, and runs under the race detector with the
//     test.
//   - StartProcess runs the real `registry serve config.yml` binary, built once
//     per test binary, on a free loopback port. Use it when the test needs what
//     only a process has: the serve command's wiring, SIGKILL and restart, or
//     two instances sharing one storage directory. A package that uses it must
//     call Main from its TestMain so the built binary is removed afterwards.
//
// Both take the same Options (storage middleware entries, Redis, htpasswd
// auth, arbitrary config edits) and return a *Registry that knows its URL,
// storage root and credentials.
//
// The client helpers (PushImage, PushIndex, PushArtifact, MountBlob, ...)
// push random OCI content, and AssertPullable pulls a reference and checks
// the digest of every byte it got back: manifest, config, layers and, for an
// index, every child, recursively. A test that "pulls fine" with this
// package has really read every blob.
package registrytest
