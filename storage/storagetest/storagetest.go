// Package storagetest has storage-driver and Redis wrappers for tests and
// measurements: a driver whose calls can be paused, failed or counted at
// chosen points (to force interleavings, or to measure), and a go-redis hook
// that counts round trips; and the Redis backends a test runs against
// (Backends: miniredis, a real server, the shared cluster of Main). The real
// Redis processes are storage/storagetest/redistest, the S3 gateway
// storage/storagetest/s3test.
//
// Importing it registers the storage middleware "count" (config.yml:
// `middleware: storage: - name: count`); list it before "reclaim" to count
// the calls that reach the real driver, reverse-link writes included.
package storagetest
