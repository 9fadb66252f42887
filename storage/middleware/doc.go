// Package middleware is the "reclaim" storage-driver middleware: the
// wrapper around the storage driver under Distribution's app that keeps
// the reverse links (storage/linkdb) in step with every link a repository
// gains or loses, and records every blob access in Redis (redisstate)
// before the call proceeds, checking GC's fences where a call would make an
// object referenced. That is the data that makes online garbage collection
// safe.
//
// Around the driver, and only for it: the Env (Open, NewEnv), built once
// per configuration, which holds the driver stack, the Redis clients and
// the tracker; the request scope (Env.Handler), which tells the driver
// which request a call belongs to and turns a refused write into HTTP 503;
// and the blob descriptor wrapper (RegistryOption), which sees the Stats
// Distribution's descriptor cache answers without a driver call.
//
// # Basics
//
// Distribution's storage only points one way, from repositories to blobs.
// The middleware (configured as `middleware: storage: - name: reclaim`;
// Open builds its Env, bind.go hands it to Distribution) adds the other
// direction: before it lets a layer link or a manifest revision link of
// repository R to blob B through, it writes a reverse link under B's
// directory naming R (linkdb.ReverseLinks); after the forward link is
// deleted it removes the reverse link. A blob with no reverse link is
// referenced by no repository.
//
// Every blob access (stat, read, redirect, commit, mount, link write) is
// recorded in Redis before the operation proceeds (redisstate.Tracker). GC
// takes a fence on an object only if it was not accessed within the
// protection window W, and every operation that would make the object
// referenced checks the fence in the same atomic Redis step that records
// its access. Whichever step comes first wins. docs/gc-protocol.md walks
// through every interleaving.
//
// # Caveats
//
//   - Reads record access best effort: with Redis down, pulls keep working and
//     the recording epoch moves forward when Redis comes back, so GC does not
//     trust the gap. Writes that need a fence check fail with a retryable
//     error (reclaim.ErrFenced, reclaim.ErrTrackerUnavailable) that Handler
//     turns into HTTP 503.
//   - The upload purger and upstream's garbage-collect get the raw driver;
//     cmd/registry guards garbage-collect.
//   - Distribution's blob descriptor cache answers HEADs without a driver
//     call; DescriptorServiceFactory sees those Stats (the registry package
//     installs it).
package middleware
