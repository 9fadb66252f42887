package linkdb

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

func TestExitCodePrecedence(t *testing.T) {
	for _, tc := range []struct {
		counts map[Kind]int64
		want   int
	}{
		{map[Kind]int64{}, ExitClean},
		{map[Kind]int64{Reclaimable: 9}, ExitClean},
		{map[Kind]int64{StaleReverse: 1}, ExitLeaks},
		{map[Kind]int64{StaleReferrer: 1, Reclaimable: 1}, ExitLeaks},
		{map[Kind]int64{Unreadable: 1, StaleReverse: 1}, ExitIncomplete},
		{map[Kind]int64{MissingReverse: 1, Unreadable: 1, StaleReverse: 1}, ExitDataLoss},
		{map[Kind]int64{BrokenForward: 1}, ExitBroken},
		{map[Kind]int64{BrokenForward: 1, StaleReverse: 1}, ExitBroken},
		{map[Kind]int64{BrokenForward: 1, Unreadable: 1}, ExitIncomplete},
		{map[Kind]int64{BrokenForward: 1, Corrupt: 1}, ExitDataLoss},
		{map[Kind]int64{Corrupt: 1}, ExitDataLoss},
		{map[Kind]int64{MissingReferrer: 1}, ExitDataLoss},
	} {
		if got := (&Report{Counts: tc.counts}).exitCode(); got != tc.want {
			t.Errorf("%v: exit %d, want %d", tc.counts, got, tc.want)
		}
	}
}

func TestReportText(t *testing.T) {
	r := &Report{
		Repositories: 2, ForwardLinks: 10, ReverseLinks: 9, Blobs: 8,
		Counts:              map[Kind]int64{MissingReverse: 1, Reclaimable: 2},
		ReclaimableComputed: true, ReclaimableBytes: 42,
		Findings: []Problem{
			{Kind: MissingReverse, Path: "/docker/registry/v2/repositories/a/_layers/sha256/ab/link", Digest: digest.FromString("x")},
			{Kind: Reclaimable, Path: "/docker/registry/v2/blobs/sha256/cd/cd00"},
		},
		ExitCode: ExitDataLoss,
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"10 forward links", "marker: absent", "missing_reverse   1", "(42 bytes)",
		"repositories/a/_layers/sha256/ab/link", "DATA-LOSS RISK", "exit 2"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "blobs/sha256/cd/cd00") {
		t.Errorf("reclaimable blobs are listed as findings to act on:\n%s", out)
	}
	js, err := json.Marshal(r)
	if err != nil || !strings.Contains(string(js), `"missing_reverse":1`) || !strings.Contains(string(js), `"exit_code":2`) {
		t.Errorf("json %s %v", js, err)
	}
}
