package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
)

func TestGarbageCollectGuard(t *testing.T) {
	base := "version: 0.1\nstorage:\n  inmemory: {}\n"
	for _, tc := range []struct {
		name, config string
		refuse       bool
	}{
		{"plain", base, false},
		{"reclaim", base + "middleware:\n  storage:\n    - name: reclaim\n", true},
		{"reclaim-disabled", base + "middleware:\n  storage:\n    - name: reclaim\n      disabled: true\n", false},
		{"other-middleware", base + "middleware:\n  storage:\n    - name: redirect\n      options: {baseurl: http://x}\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "config.yml")
			if err := os.WriteFile(p, []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			ran := false
			cmd := &cobra.Command{Use: "garbage-collect", Run: func(*cobra.Command, []string) { ran = true }}
			guardGarbageCollect(cmd)
			cmd.SetArgs([]string{p})
			cmd.SilenceUsage, cmd.SilenceErrors = true, true
			err := cmd.Execute()
			if tc.refuse != errors.Is(err, errOnlineGC) || ran == tc.refuse {
				t.Fatalf("refuse=%v: err=%v ran=%v", tc.refuse, err, ran)
			}
		})
	}
}
