package s3test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"
	// The s3aws driver registers itself with the factory.
	_ "github.com/distribution/distribution/v3/registry/storage/driver/s3-aws"
)

// VersityGWEnv names the versitygw binary the S3 tests run. When it is set,
// a missing binary fails the test instead of skipping it: CI sets it after
// installing versitygw (.ci/run), so the S3 tests cannot silently vanish.
const VersityGWEnv = "RECLAIM_TEST_VERSITYGW"

// S3 is a versitygw serving S3 on a free loopback port from a fresh
// directory, with one bucket. Start it with StartS3; t.Cleanup stops it.
//
//	go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
type S3 struct {
	// Endpoint is the server's base URL, "http://127.0.0.1:<port>".
	Endpoint string
	Bucket   string
	// Dir is the directory versitygw serves (the bucket is Dir/Bucket).
	Dir string
}

const (
	s3AccessKey = "reclaimtest"
	s3SecretKey = "reclaimtest-secret"
)

// versitygwBinary finds versitygw: $RECLAIM_TEST_VERSITYGW, else PATH, else
// ~/go/bin. It skips the test when none is installed and the variable is
// unset.
func versitygwBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(VersityGWEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s=%s: %v", VersityGWEnv, p, err)
		}
		return p
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	home, _ := os.UserHomeDir()
	if p := filepath.Join(home, "go", "bin", "versitygw"); home != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skipf("versitygw not installed (go install github.com/versity/versitygw/cmd/versitygw@v1.8.0, or set %s)", VersityGWEnv)
	return ""
}

// StartS3 starts versitygw with one bucket, "reclaim", and waits until it
// listens. It skips the test when versitygw is not installed (see
// versitygwBinary).
func StartS3(t testing.TB) *S3 {
	t.Helper()
	return StartS3At(t, t.TempDir())
}

// StartS3At is StartS3 serving directory dir, which may hold the bucket
// from an earlier run (a benchmark's generated registry, kept for reuse).
func StartS3At(t testing.TB, dir string) *S3 {
	t.Helper()
	bin := versitygwBinary(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &S3{Endpoint: "http://" + addr, Bucket: "reclaim", Dir: dir}
	if err := os.MkdirAll(filepath.Join(s.Dir, s.Bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--port", addr, "--access", s3AccessKey, "--secret", s3SecretKey, "posix", s.Dir)
	// versitygw logs every request: kept in a file, shown when the test fails.
	logPath := filepath.Join(t.TempDir(), "versitygw.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			t.Logf("versitygw log: %s (last lines):\n%s", logPath, tail(logPath, 40))
		}
	})
	// No readiness signal but the port: poll it (an external process).
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw did not listen on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Params are the s3aws driver's parameters for root (the driver's
// rootdirectory) in s's bucket, talking to endpoint (s.Endpoint, or a proxy
// in front of it).
func (s *S3) Params(endpoint, root string) map[string]any {
	return map[string]any{
		"accesskey": s3AccessKey, "secretkey": s3SecretKey, "region": "us-east-1",
		"regionendpoint": endpoint, "forcepathstyle": true, "secure": false,
		"bucket": s.Bucket, "rootdirectory": root,
		// Plain HTTP, so nothing to verify; set, the driver gets an HTTP
		// client of its own. Without it, an AWS_CA_BUNDLE in the
		// environment makes aws-sdk-go set the CA pool on
		// http.DefaultClient's transport: a write to a global that races
		// with every other test's use of http.DefaultClient.
		"skipverify": true,
	}
}

// Driver is an s3aws driver on root in s's bucket, talking to s directly.
func (s *S3) Driver(t testing.TB, root string) storagedriver.StorageDriver {
	t.Helper()
	d, err := factory.Create(context.Background(), "s3aws", s.Params(s.Endpoint, root))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// tail returns the last n lines of the file at p.
func tail(p string, n int) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
