package storage

import (
	"crypto/tls"
	"fmt"

	"github.com/reclaim-registry/reclaim/storage/tracker"
)

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
	return tracker.TLSConfig(cert, key, cas)
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
