package storage

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

// parseRedisTLS reads the middleware's `redis: tls:` block:
//
//	tls:
//	  enabled: true          # TLS with the system roots, no client certificate
//	  certificate: /path     # client certificate (mTLS), with key
//	  key: /path
//	  rootcas: [/path, ...]  # extra root CAs
//
// Any of certificate, key or rootcas implies enabled.
func parseRedisTLS(v any) (*tls.Config, error) {
	m, ok := OptionMap(v)
	if !ok {
		return nil, fmt.Errorf("must be a map, got %T", v)
	}
	var (
		enabled   bool
		cert, key string
		cas       []string
	)
	for k, x := range m {
		var err error
		switch k {
		case "enabled":
			b, isBool := x.(bool)
			if !isBool {
				err = fmt.Errorf("must be true or false, got %T", x)
			}
			enabled = b
		case "certificate":
			cert, err = str(x)
		case "key":
			key, err = str(x)
		case "rootcas":
			cas, err = strs(x)
		default:
			err = fmt.Errorf("unknown option")
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %v", k, err)
		}
	}
	if !enabled && cert == "" && key == "" && len(cas) == 0 {
		return nil, nil
	}
	return redisTLS(cert, key, cas)
}

// OptionMap accepts both map shapes YAML decoders produce for a middleware
// option block (map[string]any, map[any]any with string keys).
func OptionMap(v any) (map[string]any, bool) {
	switch m := v.(type) {
	case map[string]any:
		return m, true
	case map[any]any:
		out := make(map[string]any, len(m))
		for k, x := range m {
			ks, ok := k.(string)
			if !ok {
				return nil, false
			}
			out[ks] = x
		}
		return out, true
	}
	return nil, false
}

func strs(v any) ([]string, error) {
	switch a := v.(type) {
	case []string:
		return a, nil
	case []any:
		out := make([]string, 0, len(a))
		for _, x := range a {
			s, err := str(x)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	return nil, fmt.Errorf("must be a list, got %T", v)
}
