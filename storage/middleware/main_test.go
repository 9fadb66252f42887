package middleware

import (
	"os"
	"testing"

	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// Every test that runs on storagetest.Backends also runs on a loopback
// Redis Cluster (3 masters, 3 replicas) when redis-server is installed.
func TestMain(m *testing.M) { os.Exit(storagetest.Main(m)) }
