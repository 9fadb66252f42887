package collector

import (
	"testing"
	"time"
)

func TestRunsNewestFirst(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := &Collector{cfg: Config{Now: func() time.Time { return now }}, runs: map[string]*storedRun{}, plans: map[string]*Plan{}}
	for i, id := range []string{"b", "a", "c"} {
		rep := newReport(id, "repo", true, time.Hour, now.Add(time.Duration(i)*time.Second))
		c.store(rep)
	}
	c.runs["old"] = &storedRun{report: newReport("old", "repo", true, time.Hour, now.Add(-48*time.Hour)), expires: now.Add(-time.Hour)}
	var got []string
	for _, r := range c.Runs() {
		got = append(got, r.RunID)
	}
	if want := "c a b"; joinIDs(got) != want {
		t.Fatalf("Runs() = %v, want %s (newest first, the expired one gone)", got, want)
	}
}

func joinIDs(ids []string) string {
	s := ""
	for i, id := range ids {
		if i > 0 {
			s += " "
		}
		s += id
	}
	return s
}
