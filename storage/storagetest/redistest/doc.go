// Package redistest starts real Redis processes for tests: one server
// (StartRedisServer), a loopback Redis Cluster (StartCluster, NewCluster)
// and Sentinel with a master and a replica (StartSentinel), and writes a
// throwaway CA for TLS (WriteCA). Every process is stopped by its own PID,
// never by name. storage/storagetest's Backends runs tests on its shared
// cluster.
package redistest
