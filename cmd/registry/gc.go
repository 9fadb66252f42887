package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	distregistry "github.com/distribution/distribution/v3/registry"
	"github.com/spf13/cobra"

	"github.com/reclaim-registry/reclaim/gc/collector"
)

// Exit codes of `registry gc`, for scripts.
const (
	exitOK        = 0
	exitFailure   = 1 // usage, connection, server error
	exitRejected  = 2 // the request was wrong (400, 404, 405, 413)
	exitAuth      = 3 // 401
	exitRetry     = 4 // busy (409, 429) or aborted by a precondition (503): retry later
	exitPartially = 5 // the run finished, some deletes or checks failed
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

type gcClientFlags struct {
	url, token, user string
	json, verbose    bool
	timeout          time.Duration
}

// clientCommand makes cmd a command of the GC API's client: the client's
// flags, bound to f, and the exit codes scripts branch on (withExitCodes).
func clientCommand(f *gcClientFlags, cmd *cobra.Command) *cobra.Command {
	f.bind(cmd)
	return withExitCodes(cmd)
}

func (f *gcClientFlags) bind(cmd *cobra.Command) {
	def := os.Getenv("RECLAIM_URL")
	if def == "" {
		def = "http://127.0.0.1:5000"
	}
	cmd.Flags().StringVar(&f.url, "url", def, "registry base URL (env RECLAIM_URL)")
	cmd.Flags().StringVar(&f.token, "token", os.Getenv("RECLAIM_TOKEN"), "bearer token with delete access (env RECLAIM_TOKEN)")
	cmd.Flags().StringVar(&f.user, "user", os.Getenv("RECLAIM_USER"), "basic auth user[:password] (password also from env RECLAIM_PASSWORD)")
	cmd.Flags().BoolVar(&f.json, "json", false, "print the raw JSON response")
	cmd.Flags().BoolVarP(&f.verbose, "verbose", "v", false, "list every digest")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 30*time.Minute, "give up after this long")
	cmd.MarkFlagsMutuallyExclusive("token", "user")
}

// gcSelection holds the flags collect and plan share: what happens to
// untagged manifests, and how many links may go at most.
type gcSelection struct {
	untagged string
	limit    int
}

func (s *gcSelection) bind(cmd *cobra.Command, capUsage string) {
	cmd.Flags().StringVar(&s.untagged, "untagged", "", "untagged manifests: delete or keep (default: the server's policy)")
	cmd.Flags().IntVar(&s.limit, "cap", 0, capUsage)
}

// query is the selection as API query parameters; unset flags are left out.
func (s *gcSelection) query() url.Values {
	q := url.Values{}
	if s.untagged != "" {
		q.Set("untagged", s.untagged)
	}
	if s.limit > 0 {
		q.Set("cap", strconv.Itoa(s.limit))
	}
	return q
}

func newGCCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "gc",
		Short: "Online garbage collection through the registry's GC API",
		Long: "Online garbage collection through the registry's GC API (docs/api.md).\n\n" +
			"Exit codes: 0 done, 1 failure, 2 request rejected, 3 unauthorized,\n" +
			"4 busy or aborted (retry later), or a dry run a blocker would abort,\n" +
			"5 done with some failed deletes.",
	}
	root.AddCommand(newGCCollectCommand(), newGCPlanCommand(), newGCRunCommand())
	return root
}

func newGCCollectCommand() *cobra.Command {
	var f gcClientFlags
	var sel gcSelection
	var dryRun bool
	var plan string
	cmd := clientCommand(&f, &cobra.Command{
		Use:   "collect <repository>",
		Short: "Collect one repository: delete untagged manifests, unused layer links and unlinked blobs",
		Example: "  registry gc collect library/app --dry-run\n" +
			"  registry gc collect library/app --url https://registry.example.com --user admin\n" +
			"  registry gc collect library/app --plan 3f2a... --json",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			q := sel.query()
			q.Set("dry_run", strconv.FormatBool(dryRun))
			if plan != "" {
				q.Set("plan", plan)
			}
			return f.report(cmd, http.MethodPost, "repositories/"+args[0]+"/collect", q)
		},
	})
	sel.bind(cmd, "delete at most this many links (default: the server's cap)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would be deleted, delete nothing")
	cmd.Flags().StringVar(&plan, "plan", "", "apply this plan: delete only what it lists and still qualifies")
	return cmd
}

func newGCPlanCommand() *cobra.Command {
	var f gcClientFlags
	var sel gcSelection
	cmd := clientCommand(&f, &cobra.Command{
		Use:   "plan <repository>",
		Short: "Preview a collection and store it as a plan to apply with `gc collect --plan`",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := f.do(cmd, http.MethodPost, "repositories/"+args[0]+"/plan", sel.query())
			if err != nil {
				return err
			}
			var resp struct {
				Plan   collector.Plan  `json:"plan"`
				Report json.RawMessage `json:"report"`
			}
			if err := json.Unmarshal(body, &resp); err != nil && !f.json {
				return &exitError{exitFailure, fmt.Errorf("decode response: %w", err)}
			}
			return f.printReport(cmd, body, func(w io.Writer) {
				fmt.Fprintf(w, "plan %s (expires %s)\n  apply: registry gc collect %s --plan %s\n",
					resp.Plan.ID, resp.Plan.ExpiresAt.Local().Format(time.RFC3339), args[0], resp.Plan.ID)
			}, resp.Report)
		},
	})
	sel.bind(cmd, "plan at most this many link deletions")
	return cmd
}

func newGCRunCommand() *cobra.Command {
	var f gcClientFlags
	return clientCommand(&f, &cobra.Command{
		Use:   "run <run-id>",
		Short: "Show the report of a recent run",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.report(cmd, http.MethodGet, "runs/"+url.PathEscape(args[0]), nil)
		},
	})
}

// do calls the API and turns error responses into exit codes.
func (f *gcClientFlags) do(cmd *cobra.Command, method, path string, q url.Values) ([]byte, error) {
	return f.send(cmd, method, path, q, nil)
}

// send is do with a JSON request body (none when body is nil).
func (f *gcClientFlags) send(cmd *cobra.Command, method, path string, q url.Values, body []byte) ([]byte, error) {
	base, err := url.Parse(strings.TrimSuffix(f.url, "/"))
	if err != nil || base.Scheme == "" || base.Host == "" {
		return nil, &exitError{exitFailure, fmt.Errorf("--url %q: want http(s)://host[:port]", f.url)}
	}
	u := base.String() + "/gc/v1/" + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(cmd.Context(), method, u, rd)
	if err != nil {
		return nil, &exitError{exitFailure, err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	switch {
	case f.token != "":
		req.Header.Set("Authorization", "Bearer "+f.token)
	case f.user != "":
		user, pass, ok := strings.Cut(f.user, ":")
		if !ok {
			pass = os.Getenv("RECLAIM_PASSWORD")
		}
		req.SetBasicAuth(user, pass)
	}
	resp, err := (&http.Client{Timeout: f.timeout}).Do(req)
	if err != nil {
		return nil, &exitError{exitFailure, err}
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 256<<20))
	if err != nil {
		return nil, &exitError{exitFailure, err}
	}
	if resp.StatusCode/100 == 2 {
		return body, nil
	}
	code := exitRejected
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		code = exitAuth
	case resp.StatusCode == http.StatusConflict && !bytes.Contains(body, []byte("PLAN_INVALID")),
		resp.StatusCode == http.StatusServiceUnavailable, resp.StatusCode == http.StatusTooManyRequests:
		code = exitRetry
	case resp.StatusCode >= 500:
		code = exitFailure
	}
	if f.json {
		cmd.OutOrStdout().Write(body) //nolint:errcheck
	}
	msg := apiMessage(body)
	if code == exitAuth {
		msg += authHint(resp, f.token != "" || f.user != "")
	}
	return nil, &exitError{code, fmt.Errorf("%s: %s", resp.Status, msg)}
}

// authHint tells apart the refusals an operator fixes differently: no
// credentials sent, credentials refused, and credentials that lack the
// scope the request needs (a token's error="insufficient_scope", which
// names the scope it wanted).
func authHint(resp *http.Response, sentCredentials bool) string {
	params := challengeParams(resp.Header.Get("WWW-Authenticate"))
	switch {
	case params["error"] == "insufficient_scope" && params["scope"] != "":
		return fmt.Sprintf(" (your credentials lack the scope %s)", params["scope"])
	case params["error"] == "insufficient_scope":
		return " (your credentials lack the scope this request needs)"
	case resp.StatusCode == http.StatusForbidden:
		return " (your credentials are not allowed this request)"
	case !sentCredentials:
		return " (no credentials sent: use --token, or --user with RECLAIM_PASSWORD)"
	default:
		return " (the registry refused these credentials)"
	}
}

// challengeParams parses the parameters of a WWW-Authenticate challenge
// (`Bearer realm="...",scope="a b",error="insufficient_scope"`).
func challengeParams(h string) map[string]string {
	out := map[string]string{}
	_, rest, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok {
		return out
	}
	for rest != "" {
		k, v, ok := strings.Cut(strings.TrimLeft(rest, ", "), "=")
		if !ok {
			break
		}
		if strings.HasPrefix(v, `"`) {
			end := strings.Index(v[1:], `"`)
			if end < 0 {
				break
			}
			out[strings.ToLower(strings.TrimSpace(k))] = v[1 : end+1]
			rest = v[end+2:]
			continue
		}
		val, next, _ := strings.Cut(v, ",")
		out[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(val)
		rest = next
	}
	return out
}

func apiMessage(body []byte) string {
	var e struct {
		Errors []struct {
			Code    string         `json:"code"`
			Message string         `json:"message"`
			Detail  map[string]any `json:"detail"`
		} `json:"errors"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Errors) == 0 {
		return strings.TrimSpace(string(body))
	}
	var parts []string
	for _, x := range e.Errors {
		s := x.Code + ": " + x.Message
		if r, ok := x.Detail["reason"]; ok {
			s += fmt.Sprintf(" (reason %v)", r)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// report sends the request and prints the GC report it answers with.
func (f *gcClientFlags) report(cmd *cobra.Command, method, path string, q url.Values) error {
	body, err := f.do(cmd, method, path, q)
	if err != nil {
		return err
	}
	return f.printReport(cmd, body, nil)
}

// printReport prints the JSON as is (--json) or a summary.
func (f *gcClientFlags) printReport(cmd *cobra.Command, body []byte, header func(io.Writer), raw ...json.RawMessage) error {
	out := cmd.OutOrStdout()
	if len(raw) > 0 {
		if f.json {
			_, err := out.Write(body)
			return err
		}
		body = raw[0]
	}
	var rep collector.Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return &exitError{exitFailure, fmt.Errorf("decode report: %w", err)}
	}
	if f.json {
		if _, err := out.Write(body); err != nil {
			return err
		}
	} else {
		if header != nil {
			header(out)
		}
		writeSummary(out, &rep, f.verbose)
	}
	if len(rep.Errors) > 0 {
		return &exitError{exitPartially, fmt.Errorf("%d deletes or checks failed", len(rep.Errors))}
	}
	for _, b := range rep.Blockers {
		if b.Blocks == collector.BlocksRun {
			// a preview: a real run now would abort, as exit 4 says
			return &exitError{exitRetry, fmt.Errorf("a real run is blocked now: %s (%s)", b.Reason, b.Detail)}
		}
	}
	return nil
}

func writeSummary(w io.Writer, r *collector.Report, verbose bool) {
	verb, mode := "deleted", ""
	if r.DryRun {
		verb, mode = "to delete", " (dry run: nothing deleted)"
	}
	fmt.Fprintf(w, "repository %s  run %s  %s%s\n", r.Repository, r.RunID, r.Status, mode)
	if r.Abort != "" {
		fmt.Fprintf(w, "  aborted: %s\n", r.Abort)
	}
	for _, b := range r.Blockers {
		until := ""
		if b.Until != nil {
			until = " until " + b.Until.Local().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "  blocked (%s): %s%s: %s\n", b.Blocks, b.Reason, until, b.Detail)
	}
	list := func(label string, ds []string) {
		fmt.Fprintf(w, "  %-22s %d\n", label+":", len(ds))
		if verbose {
			for _, d := range ds {
				fmt.Fprintf(w, "      %s\n", d)
			}
		}
	}
	list("manifests "+verb, digestStrings(r.ManifestsDeleted))
	list("layer links "+verb, digestStrings(r.LayersUnlinked))
	list("blobs "+verb, digestStrings(r.BlobsDeleted))
	fmt.Fprintf(w, "  %-22s %s\n", "bytes freed:", humanBytes(r.BytesFreed))
	if len(r.BlobsInTrash) > 0 {
		// held, not freed: the trash keeps their data (trash.keep > 0)
		where, until := "in the trash", ""
		if r.DryRun {
			where = "to the trash"
		}
		if r.RestorableUntil != nil {
			until = ", restorable until " + r.RestorableUntil.Local().Format(time.RFC3339)
		}
		list("blobs "+where, digestStrings(r.BlobsInTrash))
		fmt.Fprintf(w, "  %-22s %s%s\n", "bytes in the trash:", humanBytes(r.BytesInTrash), until)
	}
	byReason := map[string]int{}
	for _, k := range r.Kept {
		byReason[k.Reason.String()]++
	}
	var rs []string
	for k, n := range byReason {
		rs = append(rs, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(rs)
	fmt.Fprintf(w, "  %-22s %d", "kept:", len(r.Kept))
	if len(rs) > 0 {
		fmt.Fprintf(w, "  (%s)", strings.Join(rs, ", "))
	}
	fmt.Fprintln(w)
	if verbose {
		for _, k := range r.Kept {
			fmt.Fprintf(w, "      %-10s %s  %s %s\n", k.Kind, k.Digest, k.Reason, k.Detail)
		}
	}
	if len(r.Changed) > 0 {
		fmt.Fprintf(w, "  %-22s %d\n", "changed since plan:", len(r.Changed))
	}
	for _, e := range r.Errors {
		fmt.Fprintf(w, "  error: %s %s: %s %s\n", e.Kind, e.Digest, e.Reason, e.Detail)
	}
	fmt.Fprintf(w, "  took %s\n", time.Duration(r.Timings.TotalMS)*time.Millisecond)
}

func digestStrings[T ~string](ds []T) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = string(d)
	}
	return out
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB (%d bytes)", float64(n)/float64(div), "KMGTPE"[exp], n)
}

// gcExitCode maps an error from a gc subcommand to the process exit code.
func gcExitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return exitFailure
}

// exit is os.Exit; tests replace it.
var exit = os.Exit

// withExitCodes makes a subcommand print its own error and exit with the
// code scripts branch on (cobra's Execute only knows success and 1).
func withExitCodes(cmd *cobra.Command) *cobra.Command {
	run := cmd.RunE
	cmd.SilenceErrors = true
	cmd.RunE = func(c *cobra.Command, args []string) error {
		err := run(c, args)
		if err == nil {
			return nil
		}
		fmt.Fprintln(c.ErrOrStderr(), "Error:", err)
		exit(gcExitCode(err))
		return err
	}
	return cmd
}

func init() {
	distregistry.RootCmd.AddCommand(newGCCommand())
}
