// Package storagetest has storage-driver and Redis wrappers for tests and
// measurements: a driver whose calls can be paused, failed or counted at
// chosen points (to force interleavings, or to measure), and a go-redis hook
// that counts round trips; and real Redis fixtures: one server
// (StartRedisServer), a loopback Redis Cluster (StartCluster) and Sentinel
// (StartSentinel), all stopped by PID.
//
// Importing it registers the storage middleware "count" (config.yml:
// `middleware: storage: - name: count`); list it before "reclaim" to count
// the calls that reach the real driver, reverse-link writes included.
package storagetest
