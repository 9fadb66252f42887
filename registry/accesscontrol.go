package registry

import (
	"fmt"
	"net/http"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/auth"
	"github.com/sirupsen/logrus"
)

// accessControl is the registry's configured access controller (`auth:`),
// built once for the GC API, the status endpoint and the referrers API.
// Distribution builds its own from the same section, and refuses to start
// when that fails.
type accessControl struct {
	ac  auth.AccessController // nil: no auth configured, the registry is open
	err error                 // fail closed: every request is refused
}

func newAccessControl(conf *configuration.Configuration) *accessControl {
	if conf == nil || conf.Auth.Type() == "" {
		return &accessControl{}
	}
	ac, err := auth.GetAccessController(conf.Auth.Type(), conf.Auth.Parameters())
	if err != nil {
		logrus.WithError(err).Error("reclaim: the GC and referrers APIs refuse requests: access controller")
	}
	return &accessControl{ac: ac, err: err}
}

// authorize asks for action on repo ("" for any authenticated caller).
// With no auth configured the registry is open, and so is this (as
// upstream). A missing grant is an auth.Challenge error.
func (a *accessControl) authorize(r *http.Request, repo, action string) error {
	if a.err != nil {
		return fmt.Errorf("access controller: %w", a.err)
	}
	if a.ac == nil {
		return nil
	}
	var access []auth.Access
	if repo != "" {
		access = append(access, auth.Access{Resource: auth.Resource{Type: "repository", Name: repo}, Action: action})
	}
	_, err := a.ac.Authorized(r, access...)
	return err
}

// authorizeCatalog asks for the registry-wide scope Distribution's catalog
// uses (registry:catalog:*): reads that span repositories (the in-use
// index, every repository's plans and usage, the console's lists).
func (a *accessControl) authorizeCatalog(r *http.Request) error {
	return a.authorizeRegistry(r, "catalog", "*")
}

// The in-use index decides which versions retention must never delete, so
// writing it is a scope of its own, in Distribution's resource-scope style
// (type "registry", as the catalog's): a token that may only browse the
// catalog cannot rewrite or forget a source. htpasswd grants it to every
// valid user, as it grants everything.
const (
	inUseResource    = "inuse"
	inUseWriteAction = "write"
)

// authorizeRegistry asks for action on the registry-wide resource
// registry:<name>.
func (a *accessControl) authorizeRegistry(r *http.Request, name, action string) error {
	if a.err != nil {
		return fmt.Errorf("access controller: %w", a.err)
	}
	if a.ac == nil {
		return nil
	}
	_, err := a.ac.Authorized(r, auth.Access{Resource: auth.Resource{Type: "registry", Name: name}, Action: action})
	return err
}
