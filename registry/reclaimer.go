package registry

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/gc"
	"github.com/reclaim-registry/reclaim/storage"
	"github.com/reclaim-registry/reclaim/storage/tracker"
)

// The background reclaimer runs inside `serve`, on every instance whose
// config enables it:
//
//	middleware:
//	  storage:
//	    - name: reclaim
//	      options:
//	        window: 1h            # W, shared with the GC API and the queue's delay
//	        reclaimer:
//	          enabled: true       # the kill switch (default false: zero deletions)
//	          interval: 1m        # between ticks (default 1m)
//	          batch: 100          # items claimed per tick (default 100)
//	          workers: 4          # parallel reviews per batch (default 4)
//	          lease: 1m           # a claimed item returns after this if not settled (default max(10 intervals, 1m))
//
// It is started when Distribution builds the HTTP handler (the app, and with
// it the reclaim storage Env, exists by then) and shares that Env: the same
// wrapped driver, tracker and Redis client as the registry's own requests.

func init() { register(startReclaimerHandler) }

// ReclaimerConfig is the parsed reclaimer block.
type ReclaimerConfig struct {
	Enabled  bool
	Interval time.Duration
	Batch    int
	Workers  int
	Lease    time.Duration
}

// ParseReclaimerConfig reads the reclaimer block. Unknown keys and wrong
// types are errors: a typo must not silently turn deletion on or off.
func ParseReclaimerConfig(config *configuration.Configuration) (ReclaimerConfig, error) {
	c := ReclaimerConfig{Interval: gc.DefaultReclaimInterval, Batch: gc.DefaultReclaimBatch}
	if config == nil {
		return c, nil
	}
	var opts map[string]any
	for _, m := range config.Middleware["storage"] {
		if m.Name == middlewareName && !m.Disabled {
			opts = m.Options
		}
	}
	raw, ok := opts["reclaimer"]
	if !ok || raw == nil {
		return c, nil
	}
	g, ok := storage.OptionMap(raw)
	if !ok {
		return c, fmt.Errorf("reclaim: middleware option reclaimer: want a map, got %T", raw)
	}
	for k, v := range g {
		switch k {
		case "enabled":
			b, ok := v.(bool)
			if !ok {
				return c, fmt.Errorf("reclaim: reclaimer.enabled: want true or false, got %v", v)
			}
			c.Enabled = b
		case "interval", "lease":
			d, err := parseDuration(v)
			if err != nil || d <= 0 {
				return c, fmt.Errorf("reclaim: reclaimer.%s: want a positive duration like 1m, got %v", k, v)
			}
			if k == "interval" {
				c.Interval = d
			} else {
				c.Lease = d
			}
		case "batch", "workers":
			n, ok := v.(int)
			if !ok || n <= 0 {
				return c, fmt.Errorf("reclaim: reclaimer.%s: want a positive integer, got %v", k, v)
			}
			if k == "batch" {
				c.Batch = n
			} else {
				c.Workers = n
			}
		default:
			return c, fmt.Errorf("reclaim: reclaimer: unknown option %q", k)
		}
	}
	return c, nil
}

// reclaimerHandle is one process's running reclaimer (or why it is not).
type reclaimerHandle struct {
	cfg  ReclaimerConfig
	r    *gc.Reclaimer // nil when disabled or not started
	err  error         // why it did not start
	stop context.CancelFunc
	done chan struct{}
}

var (
	reclaimersMu sync.Mutex
	reclaimers   = map[*configuration.Configuration]*reclaimerHandle{}
)

// reclaimerFor returns the handle for config, nil when none was started.
func reclaimerFor(config *configuration.Configuration) *reclaimerHandle {
	reclaimersMu.Lock()
	defer reclaimersMu.Unlock()
	return reclaimers[config]
}

func startReclaimerHandler(config *configuration.Configuration, next http.Handler) http.Handler {
	startReclaimer(context.Background(), config)
	return next
}

// startReclaimer starts the reclaimer of config once per configuration.
func startReclaimer(ctx context.Context, config *configuration.Configuration) *reclaimerHandle {
	reclaimersMu.Lock()
	defer reclaimersMu.Unlock()
	if h, ok := reclaimers[config]; ok {
		return h
	}
	h := &reclaimerHandle{}
	reclaimers[config] = h
	h.cfg, h.err = ParseReclaimerConfig(config)
	if h.err != nil {
		logrus.WithError(h.err).Error("reclaim: reclaimer not started: invalid configuration")
		return h
	}
	metricReclaimerEnabled.Set(0)
	if !h.cfg.Enabled {
		return h
	}
	r, q, err := newReclaimer(ctx, config, h.cfg)
	if err != nil {
		h.err = err
		logrus.WithError(err).Error("reclaim: reclaimer not started")
		return h
	}
	h.r = r
	metricReclaimerEnabled.Set(1)
	ctx, h.stop = context.WithCancel(context.WithoutCancel(ctx))
	h.done = make(chan struct{})
	go func() {
		defer close(h.done)
		// Refresh the queue gauges between ticks as well, cheaply.
		go func() {
			t := time.NewTicker(h.cfg.Interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if total, due, err := q.Len(ctx); err == nil {
						metricQueueLength.Set(float64(total))
						metricQueueDue.Set(float64(due))
					}
				}
			}
		}()
		r.Run(ctx)
	}()
	logrus.WithFields(logrus.Fields{"interval": h.cfg.Interval, "batch": h.cfg.Batch}).Info("reclaim: background reclaimer started")
	return h
}

// stopReclaimer stops config's reclaimer and forgets it (tests).
func stopReclaimer(config *configuration.Configuration) {
	reclaimersMu.Lock()
	h := reclaimers[config]
	delete(reclaimers, config)
	reclaimersMu.Unlock()
	if h != nil && h.stop != nil {
		h.stop()
		<-h.done
	}
}

// newReclaimer builds the reclaimer on the same collector wiring as the GC
// API (openStorageGC), so the blob step, window and tracker are the same.
func newReclaimer(ctx context.Context, config *configuration.Configuration, rc ReclaimerConfig) (*gc.Reclaimer, *tracker.Queue, error) {
	gcCfg, err := ParseGCConfig(config)
	if err != nil {
		return nil, nil, err
	}
	b, err := openStorageGC(ctx, config, gcCfg)
	if err != nil {
		return nil, nil, err
	}
	env, err := storage.Open(ctx, config)
	if err != nil {
		return nil, nil, err
	}
	q := env.Queue()
	log := logrus.WithField("component", "reclaimer")
	r, err := gc.NewReclaimer(b.Collector, gcQueue{q}, gc.ReclaimerConfig{
		Enabled: rc.Enabled, Interval: rc.Interval, Batch: rc.Batch, Workers: rc.Workers, Lease: rc.Lease,
		Logf:    log.Warnf,
		Observe: observeTick,
	})
	return r, q, err
}

// OpenReclaimer builds a reclaimer on config's storage, tracker and queue,
// with the kill switch on or off as enabled says: for `registry gc sweep
// --apply`, which deletes through the same step the background reclaimer
// uses. It does not start it.
func OpenReclaimer(ctx context.Context, config *configuration.Configuration, enabled bool) (*gc.Reclaimer, *tracker.Queue, error) {
	rc, err := ParseReclaimerConfig(config)
	if err != nil {
		return nil, nil, err
	}
	rc.Enabled = enabled
	return newReclaimer(ctx, config, rc)
}

// gcQueue adapts *tracker.Queue to gc.Queue.
type gcQueue struct{ q *tracker.Queue }

var _ gc.Queue = gcQueue{}

func (a gcQueue) Claim(ctx context.Context, n int, lease time.Duration) ([]gc.QueueItem, error) {
	cs, err := a.q.Claim(ctx, n, lease)
	if err != nil {
		return nil, err
	}
	out := make([]gc.QueueItem, len(cs))
	for i, c := range cs {
		out[i] = gc.QueueItem{Blob: c.Blob, Due: c.Due, Lease: c.Lease}
	}
	return out, nil
}

func toClaimed(it gc.QueueItem) tracker.Claimed {
	return tracker.Claimed{Blob: it.Blob, Due: it.Due, Lease: it.Lease}
}

func (a gcQueue) Done(ctx context.Context, it gc.QueueItem) error {
	return a.q.Done(ctx, toClaimed(it))
}

func (a gcQueue) Requeue(ctx context.Context, it gc.QueueItem, due time.Time) error {
	return a.q.Requeue(ctx, toClaimed(it), due)
}

func (a gcQueue) Len(ctx context.Context) (int64, int64, error) {
	t, d, err := a.q.Len(ctx)
	return t, d, err
}

// Reclaimer metrics, in Prometheus' default registry, named like the JSON.
var (
	metricReclaimerEnabled = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "enabled",
		Help: "1 when the background reclaimer runs in this process.",
	})
	metricReclaimerTicks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "ticks_total",
		Help: "Reclaimer ticks by result: ok, failed, or the abort reason that stopped them.",
	}, []string{"result"})
	metricReclaimerReviewed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "reviewed_total",
		Help: "Blobs reviewed by decision reason (unreferenced and already_gone are deletions).",
	}, []string{"reason"})
	metricReclaimerBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "bytes_freed_total",
		Help: "Bytes of blob data the reclaimer deleted.",
	})
	metricReclaimerTickSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "tick_duration_seconds",
		Help:    "Wall time of reclaimer ticks.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	})
	metricReclaimerLastTick = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "last_tick_timestamp_seconds",
		Help: "Unix time of the last reclaimer tick.",
	})
	metricQueueLength = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "queue_length",
		Help: "Blobs in the review queue.",
	})
	metricQueueDue = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "reclaim", Subsystem: "reclaimer", Name: "queue_due",
		Help: "Blobs in the review queue that are due now.",
	})
)

func init() {
	prometheus.MustRegister(metricReclaimerEnabled, metricReclaimerTicks, metricReclaimerReviewed, metricReclaimerBytes,
		metricReclaimerTickSeconds, metricReclaimerLastTick, metricQueueLength, metricQueueDue)
}

func observeTick(t gc.TickReport) {
	result := "ok"
	switch {
	case t.Abort != "":
		result = string(t.Abort)
	case t.Failed:
		result = "failed"
	}
	metricReclaimerTicks.WithLabelValues(result).Inc()
	metricReclaimerTickSeconds.Observe(t.Duration.Seconds())
	metricReclaimerLastTick.Set(float64(t.Started.Unix()))
	for _, d := range t.Decisions {
		metricReclaimerReviewed.WithLabelValues(d.Reason.String()).Inc()
	}
	_, bytes := t.Deleted()
	metricReclaimerBytes.Add(float64(bytes))
}
