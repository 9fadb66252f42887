/*
Package soak is the hostile end-to-end test of Reclaim: several registry
instances sharing one storage and one Redis, the background reclaimer on in
all of them, concurrent clients pushing, mounting, re-tagging, deleting and
pulling, and garbage collection running all the time through the GC API of
every instance, while racers send deliberately conflicting requests (the
same manifest PUT and DELETEd through two instances at once, HEADs through
a possibly stale descriptor cache right after a collect, re-uploads and
mounts racing a collect; see race_test.go). It proves invariant 1 of the
design (never lose referenced data) by pulling every acknowledged manifest
right after its 201 and every image that must survive at the end, blob by
blob, with every digest verified, and invariant 2 (forward link implies
reverse link) with `linkdb verify`. It then proves the other direction:
after a final collect and reclaimer pass, no unreferenced blob is left
behind.

The package holds only tests:

	go test ./test/soak/                         # short form (CI): one to two minutes
	go test ./test/soak/ -run 'TestSoak$' -soak.duration=10m -timeout=40m   # long form
	RECLAIM_SOAK_DURATION=10m go test ./test/soak/ -timeout=40m

TestSoak needs a real Redis (RECLAIM_TEST_REDIS_ADDR; it uses a key prefix
of its own) and runs, once per blob descriptor cache kind (subtests
cache=inmemory and cache=redis, in parallel), two `registry serve`
processes built from this checkout. TestSoakRedisAndCrashFaults starts a
private `redis-server` (it must be on PATH) so it can kill and restart it,
and SIGKILLs a registry in the middle of a collection. TestSoakStorageFaults
runs in-process, with a storage driver wrapper that fails a fraction of
writes and deletes. TestReclaimerThroughput measures the reclaimer on the
filesystem driver. Every test prints its numbers (operations, racing
operations, failures by reason, bytes reclaimed, throughput) with t.Log;
run with -v to see them.
*/
package soak
