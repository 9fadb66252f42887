package registry

// The console tests' access controller: the one the GC API's unit tests use.
import _ "github.com/reclaim-registry/reclaim/registry/internal/scopetest"
