package gcapi

import (
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/internal/metrics"
	"github.com/reclaim-registry/reclaim/retention"
)

// Retention metrics: each case of the failure model has its own counter
// (by reason) and its own log event.
var (
	metricRetentionAborts  = metrics.CounterVec("retention", "aborts_total", "Retention runs aborted before deleting anything, by reason.", "reason")
	metricRetentionSkips   = metrics.CounterVec("retention", "skips_total", "Repositories left out of a retention plan, by reason.", "reason")
	metricRetentionTrimmed = metrics.Counter("retention", "trimmed_total", "Candidates left for a later run because a plan was over its cap.")
	metricRetentionDropped = metrics.Counter("retention", "dropped_total", "Candidates dropped by the re-read of the in-use index after a plan was built.")
	metricRetentionChanged = metrics.CounterVec("retention", "apply_skipped_total", "Planned tags apply left because fresh state changed, by reason.", "reason")
	metricRetentionDeleted = metrics.Counter("retention", "tags_deleted_total", "Tags deleted by retention apply.")
	metricRetentionPlanSec = metrics.Histogram("retention", "plan_duration_seconds", "Wall time of building one plan.", nil)
)

func observePlan(repo string, plan *retention.Plan, err error, took time.Duration) {
	log := logrus.WithField("repository", repo)
	var ae *retention.AbortError
	if errors.As(err, &ae) {
		metricRetentionAborts.WithLabelValues(ae.Reason.String()).Inc()
		log.WithField("reason", ae.Reason).Warn("retention: run aborted: " + ae.Detail)
		return
	}
	if plan == nil {
		return
	}
	metricRetentionPlanSec.Observe(took.Seconds())
	log = log.WithField("plan", plan.ID)
	if plan.Skip != nil {
		metricRetentionSkips.WithLabelValues(plan.Skip.Reason.String()).Inc()
		log.WithField("reason", plan.Skip.Reason).Warn("retention: repository skipped: " + plan.Skip.Detail)
		return
	}
	if plan.Trimmed > 0 {
		metricRetentionTrimmed.Add(float64(plan.Trimmed))
		log.WithField("trimmed", plan.Trimmed).Info("retention: plan trimmed to its oldest candidates")
	}
	if len(plan.Dropped) > 0 {
		metricRetentionDropped.Add(float64(len(plan.Dropped)))
		log.WithField("dropped", len(plan.Dropped)).Info("retention: candidates became in use while planning")
	}
}

func observeApply(rep *retention.ApplyReport) {
	log := logrus.WithFields(logrus.Fields{"repository": rep.Repository, "plan": rep.PlanID})
	metricRetentionDeleted.Add(float64(len(rep.Deleted)))
	for _, s := range rep.Skipped {
		metricRetentionChanged.WithLabelValues(s.Reason.String()).Inc()
		log.WithFields(logrus.Fields{"tag": s.Tag, "reason": s.Reason}).Info("retention: planned tag left: " + s.Detail)
	}
	if rep.Aborted != nil {
		metricRetentionAborts.WithLabelValues(rep.Aborted.Reason.String()).Inc()
		log.WithField("reason", rep.Aborted.Reason).Warn("retention: apply stopped: " + rep.Aborted.Detail)
	}
}
