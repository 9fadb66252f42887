// Package budget is the storage budget of GC: the storage requests the
// collector, the reclaimer, retention apply, the sweep and the link
// database rebuild make share one per-process budget of requests per
// second and in flight, and slow themselves when the store answers that it
// is throttling (S3 503 SlowDown, GCS 429, a driver error marked
// retryable).
//
// Wrap puts the budget around a storage driver. Only calls whose context
// carries Mark wait on it; every other call (a client's request) passes
// straight through and never waits behind GC. A throttling answer to any
// call, a client's included, halves GC's rate (then it grows back by a
// tenth of the configured rate a second); a GC call that got one is
// retried after a backoff a bounded number of times, then fails with it.
// A client call is never retried here: its error goes up unchanged.
package budget
