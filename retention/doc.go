/*
Package retention holds what deploy-aware retention knows besides the
garbage collector: pins (versions an operator keeps on purpose; the pin
and its validation are retention/pin) and the in-use index (the exact
images each deploy source declares it runs; the scanner that reads them
out of Kubernetes YAML, and the index's Image and Source, are
retention/inuse).

It also holds the retention policy (policy.go, version.go, decide.go),
its failure model (failure.go), and the planner and applier that read
tags, manifests, the index, pins and pull times through small interfaces
(inuseread.go, pulls.go, planner.go, apply.go): see docs/api.md, "Retention".
Pull times are recorded by the storage middleware (redisstate/pulls), not
here.

The in-use index is keyed by registry path, repository plus digest, never by
team: a shared image that three teams run is in use for all of them.

The package does no I/O: the
stores live in retention/redisstore, the HTTP API in registry, the CLI in
cmd/registry. A pin protects an untagged manifest from the collector
through gc's Pinner seam; see docs/api.md, "Pins" and "In-use index".
*/
package retention
