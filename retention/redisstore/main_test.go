package redisstore

import (
	"os"
	"testing"

	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

// The stores run on miniredis, the real Redis when configured, and a
// loopback Redis Cluster when redis-server is installed.
func TestMain(m *testing.M) { os.Exit(storagetest.Main(m)) }
