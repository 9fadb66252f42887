package budget

import "github.com/reclaim-registry/reclaim/internal/metrics"

// Process-wide, summed over the budgets of the process (one per Env).
var (
	metricRequests  = metrics.Counter("budget", "requests_total", "Storage requests GC made through its budget (retries included).")
	metricWait      = metrics.Counter("budget", "wait_seconds_total", "Time GC's storage requests waited for the budget's rate, an in-flight slot or a backoff.")
	metricInFlight  = metrics.Gauge("budget", "inflight", "GC's storage requests running now.")
	metricLimit     = metrics.Gauge("budget", "rate_limit", "GC's storage request rate after the last throttling cut (requests per second; the configured rate when never cut).")
	metricThrottled = metrics.CounterVec("budget", "throttled_total", "Throttling answers from the store (503 SlowDown, 429, retryable), by whose call got it: gc or client.", "caller")
	metricCuts      = metrics.Counter("budget", "cuts_total", "Halvings of GC's storage request rate after a throttling answer.")
	metricRetries   = metrics.Counter("budget", "retries_total", "GC storage calls retried after a throttling answer.")
)
