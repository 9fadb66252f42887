// Package e2e holds Reclaim's end-to-end tests: a real registry, started in
// this process and as the real `registry serve` binary, driven over HTTP by
// go-containerregistry the way docker, crane or oras would drive it. They
// check what an operator swapping upstream Distribution for Reclaim relies
// on: images, indexes and artifacts push and pull byte for byte, mounts
// really mount, deletes really delete, and the data survives a crash and is
// shared by instances on one storage.
//
// The package has no non-test code; the reusable parts live in
// registry/registrytest.
package e2e
