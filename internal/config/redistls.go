package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// redisTLS builds the TLS client config of a Redis connection, the way
// Distribution builds its own from `redis: tls:`: an optional client
// certificate (certificate and key together) and optional extra root CAs.
// Unlike upstream, a half-configured certificate or an unreadable CA is an
// error: a Redis connection that silently drops TLS settings is worse than
// a registry that refuses to start.
func redisTLS(cert, key string, rootCAs []string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if (cert == "") != (key == "") {
		return nil, fmt.Errorf("redis tls: certificate and key must be given together")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("redis tls: client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	if len(rootCAs) > 0 {
		pool := x509.NewCertPool()
		for _, ca := range rootCAs {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return nil, fmt.Errorf("redis tls: root CA: %w", err)
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("redis tls: root CA %s: no certificate found", ca)
			}
		}
		c.RootCAs = pool
	}
	return c, nil
}
