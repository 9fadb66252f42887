package linkdb

import (
	"context"
	"testing"

	"github.com/distribution/distribution/v3/registry/storage/driver/inmemory"

	"github.com/reclaim-registry/reclaim/storage/layout"
)

func TestMarkCompleteIfEmpty(t *testing.T) {
	ctx := context.Background()

	t.Run("empty storage is complete from the start", func(t *testing.T) {
		d := inmemory.New()
		marked, err := MarkCompleteIfEmpty(ctx, d)
		if err != nil || !marked {
			t.Fatalf("MarkCompleteIfEmpty = %v, %v; want marked", marked, err)
		}
		if _, ok, err := LinkDBComplete(ctx, d); err != nil || !ok {
			t.Fatalf("LinkDBComplete = %v, %v after marking", ok, err)
		}
		// A second start changes nothing.
		if marked, err := MarkCompleteIfEmpty(ctx, d); err != nil || marked {
			t.Fatalf("second MarkCompleteIfEmpty = %v, %v; want not marked", marked, err)
		}
	})

	t.Run("storage with data needs a rebuild", func(t *testing.T) {
		d := inmemory.New()
		if err := d.PutContent(ctx, layout.RepositoryPath("team/app")+"/_layers/sha256/"+
			"aa"+"00000000000000000000000000000000000000000000000000000000000000"[:62]+"/link", []byte("x")); err != nil {
			t.Fatal(err)
		}
		marked, err := MarkCompleteIfEmpty(ctx, d)
		if err != nil || marked {
			t.Fatalf("MarkCompleteIfEmpty = %v, %v; want not marked", marked, err)
		}
		if _, ok, _ := LinkDBComplete(ctx, d); ok {
			t.Fatal("storage with repositories was marked complete")
		}
	})

	t.Run("corrupt marker is neither trusted nor overwritten", func(t *testing.T) {
		d := inmemory.New()
		if err := d.PutContent(ctx, markerPath, []byte("not a time")); err != nil {
			t.Fatal(err)
		}
		if marked, err := MarkCompleteIfEmpty(ctx, d); err == nil || marked {
			t.Fatalf("MarkCompleteIfEmpty = %v, %v; want an error", marked, err)
		}
		b, _ := d.GetContent(ctx, markerPath)
		if string(b) != "not a time" {
			t.Fatalf("marker overwritten: %q", b)
		}
	})
}
