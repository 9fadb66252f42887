package retention

import (
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/reclaim-registry/reclaim/retention/inuse"
)

func TestImagesAndSources(t *testing.T) {
	a := digest.FromString("a")
	ok := func(string) error { return nil }
	if err := ValidateImages([]inuse.Image{{Repository: "a", Digest: "sha256:nope"}}, ok); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad digest: %v", err)
	}
	if err := ValidateImages([]inuse.Image{{Repository: "BAD", Digest: a}}, func(string) error { return errors.New("no") }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad name: %v", err)
	}
	for _, s := range []string{"prod-eu", "gitops.main", "a", "A_1"} {
		if err := ValidateSource(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"", "-x", "a/b", "a{b}", "a:b", strings.Repeat("x", 129)} {
		if err := ValidateSource(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v, want ErrInvalid", s, err)
		}
	}
}
