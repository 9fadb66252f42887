package storage

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/reclaim-registry/reclaim/storage/storagetest"
)

func TestRedisTLSOptions(t *testing.T) {
	cert, key := storagetest.WriteCA(t)
	notPEM := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(notPEM, []byte("nothing here"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		tls     map[any]any
		wantTLS bool
		wantErr bool
	}{
		{"enabled with system roots", map[any]any{"enabled": true}, true, false},
		{"disabled", map[any]any{"enabled": false}, false, false},
		{"mTLS and CA", map[any]any{"certificate": cert, "key": key, "rootcas": []any{cert}}, true, false},
		{"certificate without key", map[any]any{"certificate": cert}, false, true},
		{"missing CA file", map[any]any{"rootcas": []any{"/nonexistent/ca.pem"}}, false, true},
		{"CA file without a certificate", map[any]any{"rootcas": []any{notPEM}}, false, true},
		{"unknown key", map[any]any{"insecure": true}, false, true},
		{"enabled not a bool", map[any]any{"enabled": "yes"}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := ParseOptions(map[string]any{"redis": map[any]any{"addrs": []any{"127.0.0.1:6379"}, "tls": tc.tls}})
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseOptions error = %v, want error %v", err, tc.wantErr)
			}
			if err == nil && (o.Redis.TLSConfig != nil) != tc.wantTLS {
				t.Fatalf("TLS config %v, want TLS %v", o.Redis.TLSConfig, tc.wantTLS)
			}
		})
	}
}

// Falling back to Distribution's `redis:` section keeps its TLS settings:
// dropping them would talk plaintext to a Redis configured for TLS.

func TestDistributionRedisKeepsTLS(t *testing.T) {
	cert, key := storagetest.WriteCA(t)
	c := &configuration.Configuration{}
	c.Redis.Options.Addrs = []string{"redis.internal:6380"}
	c.Redis.TLS.Certificate, c.Redis.TLS.Key, c.Redis.TLS.RootCAs = cert, key, []string{cert}
	o, err := DistributionRedis(c)
	if err != nil {
		t.Fatal(err)
	}
	if o.TLSConfig == nil || len(o.TLSConfig.Certificates) != 1 || o.TLSConfig.RootCAs == nil {
		t.Fatalf("TLS settings lost: %+v", o.TLSConfig)
	}
	c.Redis.TLS.Key = ""
	if _, err := DistributionRedis(c); err == nil {
		t.Fatal("a certificate without its key was accepted")
	}
}
