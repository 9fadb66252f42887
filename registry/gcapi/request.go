package gcapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/reclaim-registry/reclaim/gc/collector"
)

// Request parsing for the repository endpoints. Every way a request can be
// misread ends in a 400, never in a guess: a guess that lands on "real run"
// deletes data.
//
//   - The query is parsed from RawQuery with url.ParseQuery, and any error
//     (a bad %-escape, a ';') is a 400. r.URL.Query() would silently drop
//     the pair, and "dry_run=tru%e" would become "no dry_run".
//   - The body is read as every JSON body of the API is (body.go):
//     keys must match exactly (encoding/json alone matches "DRY_RUN" to
//     dry_run), each at most once (it alone lets the last of two win), and
//     nothing may follow the object.
//   - Values are exactly what the API documents: "true" or "false" (not
//     strconv.ParseBool's "1", "T", "TRUE"), a positive decimal integer,
//     "keep" or "delete", a plan id. In a body: a JSON boolean, a JSON
//     integer, a JSON string.
//   - An option may come from the query or from the body, not both.
//   - A request that does not name dry_run is a dry run: a real run needs
//     dry_run=false spelled out.

// collectRequest is what a repository request asked for. Nil or zero means
// "not given".
type collectRequest struct {
	DryRun   *bool
	Untagged string
	Cap      int
	Plan     string
	Async    bool
}

// requestOption is one option of the repository endpoints: its name in the
// query and in the JSON body, the JSON type the body must use, and how its
// text sets the request.
type requestOption struct {
	query, body string
	kind        jsonKind
	set         func(req *collectRequest, v string) error
}

type jsonKind int

const (
	jsonBool jsonKind = iota
	jsonInt
	jsonString
)

var (
	// positiveRe is a positive decimal integer as the API spells it: no
	// sign, no leading zero, no fraction or exponent.
	positiveRe = regexp.MustCompile(`^[1-9][0-9]*$`)

	requestOptions = []requestOption{
		{"dry_run", "dry_run", jsonBool, func(req *collectRequest, v string) error {
			b, err := parseBool("dry_run", v)
			if err != nil {
				return err
			}
			req.DryRun = &b
			return nil
		}},
		{"untagged", "untagged", jsonString, func(req *collectRequest, v string) error {
			if v != "keep" && v != "delete" {
				return fmt.Errorf("%w: untagged=%q: want keep or delete", errBadRequest, v)
			}
			req.Untagged = v
			return nil
		}},
		{"cap", "cap", jsonInt, func(req *collectRequest, v string) error {
			n, err := strconv.Atoi(v)
			if !positiveRe.MatchString(v) || err != nil {
				return fmt.Errorf("%w: cap=%q: want a positive integer", errBadRequest, v)
			}
			req.Cap = n
			return nil
		}},
		{"plan", "plan_id", jsonString, func(req *collectRequest, v string) error {
			if !planIDRe.MatchString(v) {
				return fmt.Errorf("%w: plan id %q", errBadRequest, v)
			}
			req.Plan = v
			return nil
		}},
		{"async", "async", jsonBool, func(req *collectRequest, v string) (err error) {
			req.Async, err = parseBool("async", v)
			return err
		}},
	}
)

func parseBool(name, v string) (bool, error) {
	switch v {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("%w: %s=%q: want true or false", errBadRequest, name, v)
}

// readRequest reads and parses the options of a repository request.
func readRequest(r *http.Request) (collectRequest, error) {
	if r.ContentLength > maxBody {
		return collectRequest{}, fmt.Errorf("%w: limit %d bytes", errTooLarge, maxBody)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return collectRequest{}, fmt.Errorf("%w: read body: %v", errBadRequest, err)
	}
	if len(body) > maxBody {
		return collectRequest{}, fmt.Errorf("%w: limit %d bytes", errTooLarge, maxBody)
	}
	return parseCollectRequest(r.URL.RawQuery, body)
}

// parseCollectRequest parses a raw query string and a JSON body. On error
// it returns the zero request, which is a dry run.
func parseCollectRequest(rawQuery string, body []byte) (collectRequest, error) {
	fromQuery, err := queryValues(rawQuery)
	if err != nil {
		return collectRequest{}, err
	}
	fromBody, err := bodyValues(body)
	if err != nil {
		return collectRequest{}, err
	}
	var req collectRequest
	for _, o := range requestOptions {
		qv, inQuery := fromQuery[o.query]
		bv, inBody := fromBody[o.body]
		v := qv
		switch {
		case inQuery && inBody:
			return collectRequest{}, fmt.Errorf("%w: %s is given in both the query and the body; give it once", errBadRequest, o.query)
		case inBody:
			v = bv
		case !inQuery:
			continue
		}
		if err := o.set(&req, v); err != nil {
			return collectRequest{}, err
		}
	}
	return req, nil
}

// queryValues returns the query's parameters by name, each given exactly
// once with a known name.
func queryValues(raw string) (map[string]string, error) {
	return strictQuery(raw, func(k string) bool { return knownOption(k, func(o requestOption) string { return o.query }) })
}

// strictQuery parses a raw query whose every parameter known accepts,
// each given exactly once.
func strictQuery(raw string, known func(string) bool) (map[string]string, error) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: query: %v", errBadRequest, err)
	}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make(map[string]string, len(q))
	for _, k := range keys {
		if !known(k) {
			return nil, fmt.Errorf("%w: unknown parameter %q", errBadRequest, k)
		}
		if len(q[k]) != 1 {
			return nil, fmt.Errorf("%w: parameter %q given %d times", errBadRequest, k, len(q[k]))
		}
		out[k] = q[k][0]
	}
	return out, nil
}

func knownOption(name string, field func(requestOption) string) bool {
	for _, o := range requestOptions {
		if field(o) == name {
			return true
		}
	}
	return false
}

// bodyValues returns the fields of a JSON object body as text, checked
// against their JSON types, read strictly (body.go). An empty (or
// all-space) body has none.
func bodyValues(body []byte) (map[string]string, error) {
	out := map[string]string{}
	err := strictBody(body, func(dec *json.Decoder) error {
		return strictFields(dec, "", func(key string) (func() error, bool) {
			i := slices.IndexFunc(requestOptions, func(o requestOption) bool { return o.body == key })
			if i < 0 {
				return nil, false
			}
			return func() error {
				var raw json.RawMessage
				if err := dec.Decode(&raw); err != nil {
					return badBody("field %q: %v", key, err)
				}
				v, err := jsonText(requestOptions[i].kind, bytes.TrimSpace(raw))
				if err != nil {
					return badBody("field %q: %v", key, err)
				}
				out[key] = v
				return nil
			}, true
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// jsonText turns a JSON value of the wanted type into the text a query
// would carry for it.
func jsonText(kind jsonKind, raw json.RawMessage) (string, error) {
	s := string(raw)
	switch kind {
	case jsonBool:
		if s == "true" || s == "false" {
			return s, nil
		}
		return "", fmt.Errorf("want true or false, got %s", s)
	case jsonInt:
		if positiveRe.MatchString(s) {
			return s, nil
		}
		return "", fmt.Errorf("want a positive integer, got %s", s)
	default:
		var v string
		if !strings.HasPrefix(s, `"`) || json.Unmarshal(raw, &v) != nil {
			return "", fmt.Errorf("want a string, got %s", s)
		}
		return v, nil
	}
}

// options turns the request into run options. A request that did not say
// dry_run is a dry run.
func (req collectRequest) options() collector.RunOptions {
	o := collector.RunOptions{DryRun: true, Cap: req.Cap, PlanID: req.Plan}
	if req.DryRun != nil {
		o.DryRun = *req.DryRun
	}
	if req.Untagged != "" {
		keep := req.Untagged == "keep"
		o.KeepUntagged = &keep
	}
	return o
}
