package pause

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestForWaits(t *testing.T) {
	start := time.Now()
	if err := For(context.Background(), 20*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if waited := time.Since(start); waited < 20*time.Millisecond {
		t.Fatalf("returned after %s, before the 20ms it was asked to wait", waited)
	}
}

func TestForEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := For(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("For on a cancelled context: %v, want context.Canceled", err)
	}
}

func TestEveryCallsUntilItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	Every(ctx, time.Millisecond, func() {
		if calls++; calls == 3 {
			cancel()
		}
	})
	if calls != 3 {
		t.Fatalf("fn called %d times after the context ended at the 3rd, want 3", calls)
	}
}

func TestEveryInBackgroundStopWaitsForTheLastCall(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var returned bool
	stop := EveryInBackground(context.Background(), time.Millisecond, func() {
		select {
		case entered <- struct{}{}:
			<-release
			returned = true
		default: // later calls: nothing to do
		}
	})
	<-entered
	stopped := make(chan struct{})
	go func() {
		stop()
		close(stopped)
	}()
	select {
	case <-stopped:
		t.Fatal("stop returned while fn was still running")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	<-stopped
	if !returned {
		t.Fatal("stop returned before fn did")
	}
	stop() // a second stop does nothing
}
