// Package deletionevents tells the endpoints of Distribution's
// `notifications:` block what GC, the reclaimer and retention deleted, in
// Distribution's own envelope and through Distribution's own endpoint
// sinks (queue, retries with a breaker, HTTP), so a consumer of the
// registry's events needs no change (docs/events.md).
package deletionevents

import (
	"context"
	"net"
	"os"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/notifications"
	events "github.com/docker/go-events"
	"github.com/google/uuid"
	"github.com/sirupsen/logrus"

	"github.com/reclaim-registry/reclaim/reclaim"
)

// Extension is Reclaim's own part of an event, under the event's "reclaim"
// field: Distribution's Event type has no such field, so a consumer that
// decodes into it ignores it.
type Extension struct {
	Source   string             `json:"source"` // gc, reclaimer, retention
	Kind     reclaim.ObjectKind `json:"kind"`   // manifest, layer_link, blob, tag
	Reason   string             `json:"reason"`
	RunID    string             `json:"run_id,omitempty"`
	PlanID   string             `json:"plan_id,omitempty"`
	Instance string             `json:"instance,omitempty"`
	// TrashEntry is set when the object went to the trash (trash.keep >
	// 0): restorable by this id (POST /gc/v1/trash/restore) until it
	// expires; without it the delete is final.
	TrashEntry string `json:"trash_entry,omitempty"`
}

// Event is Distribution's event with the extension beside its fields.
type Event struct {
	notifications.Event
	Reclaim Extension `json:"reclaim"`
}

// Sink hands deletions to the configured endpoints. Deleted only queues:
// each endpoint's queue is in memory and sends on its own goroutine.
type Sink struct {
	sink   events.Sink
	source notifications.SourceRecord
	now    func() time.Time
}

// New builds a Sink on the enabled endpoints of conf's notifications
// block, configured as Distribution's app configures them; nil when there
// is none.
func New(conf *configuration.Configuration) *Sink {
	var sinks []events.Sink
	for _, e := range conf.Notifications.Endpoints {
		if e.Disabled {
			continue
		}
		sinks = append(sinks, endpoint(e))
	}
	if len(sinks) == 0 {
		return nil
	}
	return &Sink{sink: events.NewBroadcaster(sinks...), source: source(conf.HTTP.Addr), now: time.Now}
}

// endpoint is Distribution's endpoint for e behind e's ignore rules. The
// rules are applied here, not by the endpoint: Distribution's ignoring
// sink accepts its own Event type only (it would panic on ours), and the
// extension needs ours.
func endpoint(e configuration.Endpoint) events.Sink {
	ep := notifications.NewEndpoint(e.Name, e.URL, notifications.EndpointConfig{
		Timeout: e.Timeout, Threshold: e.Threshold, Backoff: e.Backoff, Headers: e.Headers,
	})
	ig := &ignoring{Sink: ep, mediaTypes: map[string]bool{}, actions: map[string]bool{}}
	for _, m := range append(append([]string{}, e.IgnoredMediaTypes...), e.Ignore.MediaTypes...) {
		ig.mediaTypes[m] = true
	}
	for _, a := range e.Ignore.Actions {
		ig.actions[a] = true
	}
	return ig
}

// ignoring drops the events an endpoint's ignore rules name, as
// Distribution's ignoring sink does (by target media type, by action).
type ignoring struct {
	events.Sink
	mediaTypes, actions map[string]bool
}

func (s *ignoring) Write(ev events.Event) error {
	e := ev.(Event)
	if s.mediaTypes[e.Target.MediaType] || s.actions[e.Action] {
		return nil
	}
	return s.Sink.Write(ev)
}

// source is the event's source as Distribution's app writes it: host name
// and the listener's port.
func source(addr string) notifications.SourceRecord {
	host, err := os.Hostname()
	if err != nil {
		return notifications.SourceRecord{Addr: addr}
	}
	if _, port, err := net.SplitHostPort(addr); err == nil {
		host = net.JoinHostPort(host, port)
	}
	return notifications.SourceRecord{Addr: host}
}

// Deleted queues one delete event per object of d, in d's order, on every
// endpoint. Distribution's HTTP sink posts one envelope per event.
func (s *Sink) Deleted(_ context.Context, d reclaim.Deletions) {
	now := s.now().UTC()
	for _, o := range d.Objects {
		if err := s.sink.Write(s.event(now, d, o)); err != nil {
			logrus.WithError(err).WithField("component", "deletionevents").Warn("reclaim: deletion event not queued")
		}
	}
}

func (s *Sink) event(now time.Time, d reclaim.Deletions, o reclaim.Deletion) Event {
	var e notifications.Event
	e.ID, e.Timestamp, e.Action = uuid.NewString(), now, notifications.EventActionDelete
	e.Target.MediaType, e.Target.Digest, e.Target.Size, e.Target.Length = o.MediaType, o.Digest, o.Size, o.Size
	e.Target.Repository, e.Target.Tag = o.Repository, o.Tag
	e.Actor.Name = "reclaim " + d.Source
	e.Source = s.source
	return Event{Event: e, Reclaim: Extension{Source: d.Source, Kind: o.Kind, Reason: o.Reason, RunID: d.RunID, PlanID: d.PlanID, Instance: d.Instance, TrashEntry: o.Trash}}
}
