// Package accesscontrol is the registry's configured access controller
// (`auth:`), built once for the GC API, its status endpoint, the console
// and the referrers API. Distribution builds its own from the same
// section, and refuses to start when that fails; here a controller that
// cannot be built refuses every request (fail closed).
package accesscontrol

import (
	"fmt"
	"net/http"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/auth"
	"github.com/sirupsen/logrus"
)

// Control is the configured access controller. The zero Control is an
// open registry (no auth configured).
type Control struct {
	ac  auth.AccessController // nil: no auth configured, the registry is open
	err error                 // fail closed: every request is refused
}

// New builds the access controller conf configures.
func New(conf *configuration.Configuration) *Control {
	if conf == nil || conf.Auth.Type() == "" {
		return &Control{}
	}
	ac, err := auth.GetAccessController(conf.Auth.Type(), conf.Auth.Parameters())
	if err != nil {
		logrus.WithError(err).Error("reclaim: the GC and referrers APIs refuse requests: access controller")
	}
	return &Control{ac: ac, err: err}
}

// Authorize asks for action on repo ("" for any authenticated caller).
// With no auth configured the registry is open, and so is this (as
// upstream). A missing grant is an auth.Challenge error.
func (a *Control) Authorize(r *http.Request, repo, action string) error {
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

// AuthorizeCatalog asks for the registry-wide scope Distribution's catalog
// uses (registry:catalog:*): reads that span repositories (the in-use
// index, every repository's plans and usage, the console's lists).
func (a *Control) AuthorizeCatalog(r *http.Request) error {
	return a.AuthorizeRegistry(r, "catalog", "*")
}

// AuthorizeRegistry asks for action on the registry-wide resource
// registry:<name>.
func (a *Control) AuthorizeRegistry(r *http.Request, name, action string) error {
	if a.err != nil {
		return fmt.Errorf("access controller: %w", a.err)
	}
	if a.ac == nil {
		return nil
	}
	_, err := a.ac.Authorized(r, auth.Access{Resource: auth.Resource{Type: "registry", Name: name}, Action: action})
	return err
}

// Grant is the controller's answer to access as Distribution's App asks
// it (the referrers API answers in Distribution's error format): an error
// building the controller comes back as broken, and an open registry
// grants everything (an empty grant).
func (a *Control) Grant(r *http.Request, access ...auth.Access) (grant *auth.Grant, broken, err error) {
	if a.err != nil {
		return nil, a.err, nil
	}
	if a.ac == nil {
		return &auth.Grant{}, nil, nil
	}
	grant, err = a.ac.Authorized(r, access...)
	return grant, nil, err
}
