package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/distribution/distribution/v3/configuration"
)

// configPath is the configuration file a command was given: its argument,
// else $REGISTRY_CONFIGURATION_PATH, as upstream's commands resolve it.
func configPath(args []string) string {
	if len(args) > 0 {
		return args[0]
	}
	return os.Getenv("REGISTRY_CONFIGURATION_PATH")
}

// readConfig parses a configuration file (with Distribution's REGISTRY_*
// environment overrides), with upstream's error messages.
func readConfig(path string) (*configuration.Configuration, error) {
	if path == "" {
		return nil, errors.New("configuration path unspecified")
	}
	fp, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fp.Close()
	conf, err := configuration.Parse(fp)
	if err != nil {
		return nil, fmt.Errorf("error parsing %s: %w", path, err)
	}
	return conf, nil
}

// oneLine keeps an error on the single line the operator reads.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}
