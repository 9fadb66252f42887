package reclaim

// RetryAfterUnavailable is the Retry-After header, in seconds, of every
// 503 Service Unavailable Reclaim answers: a registry write the storage
// middleware refused (a fence, or Redis down) and a GC API request the
// registry's state cannot serve right now (GC_ABORTED, RETENTION_ABORTED,
// UNAVAILABLE). Both mean "the registry's state right now, not the
// request": a fence lasts one lease at most and Redis comes back on its
// own, so the earliest retry that can succeed is a second away, and a
// client that honours the header (a push, a CI job calling the GC API)
// loses no more than that. docs/api.md ("Errors") gives the other
// statuses' Retry-After.
const RetryAfterUnavailable = "1"
