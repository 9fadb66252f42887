// Package rlog gives Reclaim's packages a logger carrying the request's
// fields. Distribution's own context logger is internal to it; its logrus
// standard logger carries the level and format from config.yml, so Reclaim
// logs through that.
package rlog

import (
	"context"

	"github.com/sirupsen/logrus"
)

// From returns a logger with the request id and repository name of ctx,
// when Distribution put them there.
func From(ctx context.Context) *logrus.Entry {
	e := logrus.NewEntry(logrus.StandardLogger())
	for _, k := range []string{"http.request.id", "vars.name"} {
		if v, ok := ctx.Value(k).(string); ok && v != "" {
			e = e.WithField(k, v)
		}
	}
	return e
}
