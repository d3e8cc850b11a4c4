// Package dashboards is the one source of canopy's Grafana dashboards: each
// panel with the operator question it answers and its PromQL. Render writes
// the dashboard JSON files that Grafana provisioning and the Helm chart load
// (deploy/helm/canopy/dashboards) and the guide to them (docs/DASHBOARDS.md);
// a test keeps the committed files equal to what Render gives, and another
// evaluates every query against a real Prometheus scraping canopy.
package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Dashboard is one Grafana dashboard.
type Dashboard struct {
	UID, Title string
	// File is the JSON file's name under the dashboards directory.
	File string
	// About says who the dashboard is for.
	About  string
	Panels []Panel
}

// Panel is one time series panel.
type Panel struct {
	Title string
	// Question is the operator question the panel answers; it is the
	// panel's description in Grafana.
	Question string
	// Unit is Grafana's unit id: "s", "bytes", "percentunit", "ops",
	// "short".
	Unit    string
	Queries []Query
}

// Query is one PromQL expression of a panel. $__rate_interval is Grafana's
// rate window.
type Query struct {
	Expr, Legend string
}

const rate = "$__rate_interval"

func q(expr, legend string) Query {
	return Query{Expr: strings.ReplaceAll(expr, "RATE", rate), Legend: legend}
}

// Scope are the label matchers every series selector of every query
// carries: the dashboards' job, namespace and instance variables, so that
// one Prometheus holding several deployments shows one (or a chosen few) at
// a time. Each variable's "All" is ".*", which also matches a series
// without the label (a Prometheus outside Kubernetes has no namespace).
const Scope = `job=~"$job", namespace=~"$namespace", instance=~"$instance"`

// metricName finds the series names in canopy's queries: canopy's own and
// the Go client's process_ and go_ series.
var metricName = regexp.MustCompile(`\b(?:canopy|process|go)_[a-zA-Z0-9_]*`)

// scope adds Scope to every series selector of expr.
func scope(expr string) string {
	var b strings.Builder
	last := 0
	for _, m := range metricName.FindAllStringIndex(expr, -1) {
		b.WriteString(expr[last:m[1]])
		last = m[1]
		if strings.HasPrefix(expr[last:], "{") {
			b.WriteString("{" + Scope + ", ")
			last++
		} else {
			b.WriteString("{" + Scope + "}")
		}
	}
	b.WriteString(expr[last:])
	return b.String()
}

// variables are the dashboards' template variables: the data source, then
// job, namespace and instance, each narrowing the next, each multi-valued
// with an "All" of ".*". They list the values of series canopy exposes, so
// a job without canopy in it is not offered.
func variables() []any {
	ds := map[string]any{"type": "prometheus", "uid": "${datasource}"}
	v := func(name, label, selector string) map[string]any {
		query := fmt.Sprintf("label_values(%s, %s)", selector, name)
		return map[string]any{
			"name": name, "label": label, "type": "query", "datasource": ds,
			"query":      map[string]any{"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery", "qryType": 1},
			"definition": query, "refresh": 2, "sort": 1,
			"multi": true, "includeAll": true, "allValue": ".*",
			"current": map[string]any{"selected": true, "text": []string{"All"}, "value": []string{"$__all"}},
		}
	}
	return []any{
		map[string]any{"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"},
		v("job", "Job", `{__name__=~"canopy_.+"}`),
		v("namespace", "Namespace", `{__name__=~"canopy_.+", job=~"$job"}`),
		v("instance", "Instance", `{__name__=~"canopy_.+", job=~"$job", namespace=~"$namespace"}`),
	}
}

// quantiles are the p50, p99 and p99.9 of a histogram (or the quantiles
// ps), grouped by the label by when it is not "". Each query reads native
// histograms or classic buckets, whichever the Prometheus scraping canopy
// stores: canopy exposes both, a Prometheus with native histograms enabled
// may keep only the native one (then x_bucket has no series), one without
// keeps only the buckets (then x has none). Native comes first, so a
// server that keeps both uses the finer one.
func quantiles(metric, by string, ps ...string) []Query {
	if len(ps) == 0 {
		ps = []string{"0.5", "0.99", "0.999"}
	}
	var out []Query
	for _, p := range ps {
		legend := "p" + strings.TrimPrefix(p, "0.")
		classic, native := "le", ""
		if by != "" {
			classic, native = "le, "+by, " by ("+by+")"
			legend = "{{" + by + "}} " + legend
		}
		out = append(out, q(fmt.Sprintf("histogram_quantile(%s, sum%s (rate(%s[RATE]))) or histogram_quantile(%s, sum by (%s) (rate(%s_bucket[RATE])))",
			p, native, metric, p, classic, metric), legend))
	}
	return out
}

// All are canopy's dashboards.
var All = []Dashboard{
	{
		UID: "canopy-overview", Title: "canopy / overview", File: "canopy-overview.json",
		About: "Is canopy keeping up, and are conductors woken in time? The first dashboard to open.",
		Panels: []Panel{
			{Title: "Events in", Unit: "ops",
				Question: "How many agent events and human inputs per second is canopy projecting, and what became of them?",
				Queries:  []Query{q(`sum by (topic, outcome) (rate(canopy_projector_records_consumed_total[RATE]))`, "{{topic}} {{outcome}}")}},
			{Title: "Wakes out", Unit: "ops",
				Question: "How often are conductors woken, on the normal and the priority lane?",
				Queries:  []Query{q(`sum by (lane) (rate(canopy_projector_wakes_published_total[RATE]))`, "{{lane}}")}},
			{Title: "Event to wake latency", Unit: "s",
				Question: "How long after an agent's event (or a human's input) was produced is its conductor's wake committed? (p50, p99, p99.9 per lane, from the record's producer timestamp)",
				Queries:  quantiles("canopy_projector_wake_lag_seconds", "lane")},
			{Title: "Priority path stages", Unit: "s",
				Question: "Where do a human input's milliseconds go on its way to its committed wake? (p99 per stage: fetch, queued, applied, built, waited for the commit in flight, produced, committed)",
				Queries:  quantiles("canopy_projector_priority_stage_seconds", "stage", "0.99")},
			{Title: "Consumer lag", Unit: "short",
				Question: "Is any partition falling behind its input? (records not yet applied, per topic and partition)",
				Queries:  []Query{q(`max by (topic, partition) (canopy_projector_consumer_lag_records)`, "{{topic}} p{{partition}}")}},
			{Title: "Errors", Unit: "ops",
				Question: "Is canopy refusing input or failing to commit? (dead letters, reroutes, failed commits, failed restores per second)",
				Queries: []Query{
					q(`sum(rate(canopy_projector_dead_letters_total[RATE]))`, "dead letters"),
					q(`sum(rate(canopy_projector_reroutes_total[RATE]))`, "rerouted"),
					q(`sum(rate(canopy_projector_commits_total{result="failed"}[RATE]))`, "failed commits"),
					q(`sum(rate(canopy_projector_restores_total{result="failed"}[RATE]))`, "failed restores"),
				}},
			{Title: "Stale snapshots", Unit: "percentunit",
				Question: "What share of wakes carry a snapshot built while the projection was behind?",
				Queries:  []Query{q(`sum(rate(canopy_snapshot_stale_total[RATE])) / sum(rate(canopy_projector_wakes_published_total[RATE]))`, "stale share")}},
			{Title: "Restarts and failed commits", Unit: "short",
				Question: "Is a projector process in a restart loop? (its instance failed and was replaced, and commits failed, per instance per window: CanopyProjectorRestartLoop, CanopyCommitsFailing)",
				Queries: []Query{
					q(`sum by (instance) (increase(canopy_projector_instance_restarts_total[RATE]))`, "{{instance}} restarts"),
					q(`sum by (instance) (increase(canopy_projector_commits_total{result="failed"}[RATE]))`, "{{instance}} failed commits"),
				}},
			{Title: "Stalled partitions", Unit: "short",
				Question: "Does a partition make no progress while its records wait? (partitions whose fetched records have waited longer than -stalled-after, 60 s, with no commit past them, restarts included: CanopyPartitionStalled; /readyz names them)",
				Queries:  []Query{q(`max by (instance) (canopy_projector_partitions_stalled)`, "{{instance}}")}},
			{Title: "Poison records", Unit: "short",
				Question: "Did a record fail the same way again and again until it was dead-lettered so that its partition could go on? How often did partitions rewind to their last commit to narrow such a failure down? (per window: CanopyPoisonRecords; the dead-letter topic's headers say why)",
				Queries: []Query{
					q(`sum(increase(canopy_projector_poison_records_total[RATE]))`, "poison records"),
					q(`sum by (instance) (increase(canopy_projector_rewinds_total[RATE]))`, "{{instance}} rewinds"),
				}},
			{Title: "Redactions", Unit: "short",
				Question: "Which kinds of secret are people and agents sending in free text, and how many did canopy replace before keeping anything? (per window, by rule: a built-in rule, an operator's pattern, field:<rule>; the projector's and the gateway's together, each secret counted once; docs/CONTRACT.md \"Redaction\")",
				Queries:  []Query{q(`sum by (rule) (increase(canopy_redactions_total[RATE])) > 0`, "{{rule}}")}},
		},
	},
	{
		UID: "canopy-snapshots", Title: "canopy / snapshots", File: "canopy-snapshots.json",
		About: "What the conductor sees: snapshot sizes, truncation and staleness, and what building them costs.",
		Panels: []Panel{
			{Title: "Snapshot size", Unit: "bytes",
				Question: "How close are snapshots to their byte budget?",
				Queries:  quantiles("canopy_snapshot_size_bytes", "")},
			{Title: "Nodes per snapshot", Unit: "short",
				Question: "How many nodes does a conductor see per wake?",
				Queries:  quantiles("canopy_snapshot_nodes", "")},
			{Title: "Truncated share", Unit: "percentunit",
				Question: "What share of snapshots leave something out (nodes, handles or text), per lane?",
				Queries: []Query{q(`sum by (lane) (rate(canopy_snapshot_truncated_total[RATE])) / sum by (lane) (rate(canopy_projector_wakes_published_total[RATE]))`,
					"{{lane}}")}},
			{Title: "Omitted nodes", Unit: "ops",
				Question: "How many nodes per second do snapshot bounds leave out?",
				Queries:  []Query{q(`sum(rate(canopy_snapshot_omitted_nodes_total[RATE]))`, "omitted nodes")}},
			{Title: "Stale snapshots", Unit: "ops",
				Question: "How many stale snapshots per second, per lane?",
				Queries:  []Query{q(`sum by (lane) (rate(canopy_snapshot_stale_total[RATE]))`, "{{lane}}")}},
			{Title: "Build time", Unit: "s",
				Question: "How long does building one snapshot take?",
				Queries:  quantiles("canopy_snapshot_build_seconds", "")},
			{Title: "Triggers", Unit: "ops",
				Question: "Why are conductors woken? (triggers per second by kind and lane)",
				Queries:  []Query{q(`sum by (lane, kind) (rate(canopy_projector_wake_triggers_total[RATE]))`, "{{lane}} {{kind}}")}},
		},
	},
	{
		UID: "canopy-scale-out", Title: "canopy / scale-out", File: "canopy-scale-out.json",
		About: "Partitions, instances, restores, commits and the state store: is the group balanced and healthy?",
		Panels: []Panel{
			{Title: "Partitions owned", Unit: "short",
				Question: "How are partitions spread over projector instances?",
				Queries:  []Query{q(`sum by (instance) (canopy_projector_partitions_owned)`, "{{instance}}")}},
			{Title: "Partitions restoring", Unit: "short",
				Question: "Is any instance restoring state from the changelog now?",
				Queries:  []Query{q(`sum by (instance) (canopy_projector_partitions_restoring)`, "{{instance}}")}},
			{Title: "Rebalances", Unit: "short",
				Question: "How often does the group rebalance, and how many partitions move each time? Did it stall? (assignments and revocations, the partitions they moved, and instances that got no assignment for the stall timeout and rejoined as fresh members, per window)",
				Queries: []Query{
					q(`sum by (change) (increase(canopy_projector_rebalances_total[RATE]))`, "{{change}}"),
					q(`sum by (change) (increase(canopy_projector_partition_changes_total[RATE]))`, "partitions {{change}}"),
					q(`sum(increase(canopy_projector_group_stalls_total[RATE]))`, "group stalls (rejoined fresh)"),
				}},
			{Title: "Restore progress", Unit: "ops",
				Question: "Is a restore under way moving, and how fast? (changelog records written to the state store per second, per instance, counted as the restore goes)",
				Queries:  []Query{q(`sum by (instance) (rate(canopy_projector_restored_records_total[RATE]))`, "{{instance}} records/s")}},
			{Title: "Restore time", Unit: "s",
				Question: "How long did taking over a partition take? (restores that ended)",
				Queries:  quantiles("canopy_projector_restore_seconds", "", "0.5", "0.99")},
			{Title: "Commit time", Unit: "s",
				Question: "How long does committing a batch (transaction + Pebble) take?",
				Queries:  quantiles("canopy_projector_commit_seconds", "")},
			{Title: "Pebble disk and cache", Unit: "bytes",
				Question: "How much disk does each instance's state use, and how big is its block cache?",
				Queries: []Query{
					q(`sum by (instance) (canopy_pebble_disk_usage_bytes)`, "{{instance}} disk"),
					q(`sum by (instance) (canopy_pebble_block_cache_size_bytes)`, "{{instance}} cache"),
				}},
			{Title: "Memory budget", Unit: "bytes",
				Question: "Is each instance within its memory limit, and how full is its budget of runs in memory?",
				Queries: []Query{
					q(`max by (instance) (canopy_projector_memory_limit_bytes)`, "{{instance}} limit"),
					q(`max by (instance) (process_resident_memory_bytes and on (instance) canopy_projector_memory_limit_bytes)`, "{{instance}} RSS"),
					q(`max by (instance) (go_memstats_heap_inuse_bytes and on (instance) canopy_projector_memory_limit_bytes)`, "{{instance}} Go heap"),
					q(`max by (instance) (canopy_projector_hot_runs_limit_bytes)`, "{{instance}} runs budget"),
					q(`max by (instance) (canopy_projector_hot_runs_bytes)`, "{{instance}} runs in memory"),
				}},
			{Title: "Runs in memory", Unit: "short",
				Question: "How often is a run found in memory, read back from Pebble, or evicted to keep the budget; how often are nodes of runs too large to keep whole read back or dropped? (per second, and the hit ratio)",
				Queries: []Query{
					q(`sum by (instance) (rate(canopy_projector_hot_run_hits_total[RATE]))`, "{{instance}} hits/s"),
					q(`sum by (instance) (rate(canopy_projector_hot_run_misses_total[RATE]))`, "{{instance}} misses/s"),
					q(`sum by (instance) (rate(canopy_projector_hot_run_evictions_total[RATE]))`, "{{instance}} evictions/s"),
					q(`sum by (instance) (rate(canopy_projector_run_node_reads_total[RATE]))`, "{{instance}} nodes read back/s"),
					q(`sum by (instance) (rate(canopy_projector_run_node_evictions_total[RATE]))`, "{{instance}} nodes dropped/s"),
					q(`sum by (instance) (rate(canopy_projector_hot_run_hits_total[RATE])) / clamp_min(sum by (instance) (rate(canopy_projector_hot_run_hits_total[RATE])) + sum by (instance) (rate(canopy_projector_hot_run_misses_total[RATE])), 1e-9)`,
						"{{instance}} hit ratio"),
				}},
			{Title: "Pebble health", Unit: "short",
				Question: "Is the state store keeping up? (compactions per second, read amplification, cache hit ratio)",
				Queries: []Query{
					q(`sum by (instance) (rate(canopy_pebble_compactions_total[RATE]))`, "{{instance}} compactions/s"),
					q(`max by (instance) (canopy_pebble_read_amplification)`, "{{instance}} read amp"),
					q(`sum by (instance) (rate(canopy_pebble_block_cache_hits_total[RATE])) / clamp_min(sum by (instance) (rate(canopy_pebble_block_cache_hits_total[RATE])) + sum by (instance) (rate(canopy_pebble_block_cache_misses_total[RATE])), 1e-9)`,
						"{{instance}} cache hit ratio"),
				}},
		},
	},
	{
		UID: "canopy-gateway", Title: "canopy / gateway", File: "canopy-gateway.json",
		About: "The humans' way in: requests, errors and latency of the conductor gateway.",
		Panels: []Panel{
			{Title: "Requests", Unit: "reqps",
				Question: "How many requests per second does the gateway serve, per route and status?",
				Queries:  []Query{q(`sum by (route, code) (rate(canopy_gateway_requests_total[RATE]))`, "{{route}} {{code}}")}},
			{Title: "Request latency", Unit: "s",
				Question: "How long do requests take, per route? (an input's time includes Kafka's acknowledgement)",
				Queries:  quantiles("canopy_gateway_request_duration_seconds", "route")},
			{Title: "Refused and failed", Unit: "percentunit",
				Question: "What share of requests fail on canopy's side (5xx) or are refused (4xx)?",
				Queries: []Query{
					// "or vector(0)": no 5xx series yet means none failed.
					q(`(sum(rate(canopy_gateway_requests_total{code=~"5.."}[RATE])) or vector(0)) / sum(rate(canopy_gateway_requests_total[RATE]))`, "5xx"),
					q(`(sum(rate(canopy_gateway_requests_total{code=~"4.."}[RATE])) or vector(0)) / sum(rate(canopy_gateway_requests_total[RATE]))`, "4xx"),
				}},
			{Title: "Kafka produce", Unit: "ops",
				Question: "Are human inputs reaching Kafka? (records produced per second by the gateway)",
				Queries:  []Query{q(`sum(rate(canopy_kafka_produce_records_total{client="gateway"}[RATE]))`, "records/s")}},
		},
	},
}

// JSON renders d as a Grafana dashboard for file provisioning or the
// sidecar: data source, job, namespace and instance variables, one row of
// two panels at a time.
func (d Dashboard) JSON() ([]byte, error) {
	ds := map[string]any{"type": "prometheus", "uid": "${datasource}"}
	panels := make([]any, 0, len(d.Panels))
	for i, p := range d.Panels {
		targets := make([]any, 0, len(p.Queries))
		for j, qq := range p.Queries {
			targets = append(targets, map[string]any{
				"refId": string(rune('A' + j)), "expr": scope(qq.Expr), "legendFormat": qq.Legend, "datasource": ds,
			})
		}
		panels = append(panels, map[string]any{
			"id": i + 1, "type": "timeseries", "title": p.Title, "description": p.Question, "datasource": ds,
			"gridPos":     map[string]int{"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i / 2)},
			"fieldConfig": map[string]any{"defaults": map[string]any{"unit": p.Unit}, "overrides": []any{}},
			"options":     map[string]any{"legend": map[string]any{"displayMode": "list", "placement": "bottom"}},
			"targets":     targets,
		})
	}
	dash := map[string]any{
		"uid": d.UID, "title": d.Title, "description": d.About, "tags": []string{"canopy"},
		"schemaVersion": 39, "version": 1, "editable": true, "refresh": "30s", "timezone": "",
		"time":       map[string]string{"from": "now-1h", "to": "now"},
		"templating": map[string]any{"list": variables()},
		"panels":     panels,
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(dash); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Guide renders docs/DASHBOARDS.md: which panel answers which question.
func Guide() []byte {
	var b bytes.Buffer
	b.WriteString("<!-- Generated by internal/dashboards (go test ./internal/dashboards -update); do not edit. -->\n\n")
	b.WriteString("# Dashboards: which panel answers which question\n\n")
	b.WriteString("The dashboards live in `deploy/helm/canopy/dashboards/` (Grafana file provisioning, or the Helm chart's\n")
	b.WriteString("ConfigMaps for Grafana's sidecar). Every query below is evaluated against a real Prometheus scraping canopy\n")
	b.WriteString("in `make test` (internal/dashboards/prometheus_test.go), once storing classic histograms and once with\n")
	b.WriteString("native histograms on: each quantile query reads native histograms or classic `_bucket` series, whichever\n")
	b.WriteString("the server keeps. The alerts are in `deploy/helm/canopy/rules/`.\n\n")
	b.WriteString("Each dashboard has `job`, `namespace` and `instance` variables (multi-valued, \"All\" by default), so that\n")
	b.WriteString("one Prometheus can hold several deployments: every series selector below carries\n")
	b.WriteString("`{" + Scope + "}` in the dashboard JSON (left out here to keep the queries readable).\n")
	for _, d := range All {
		fmt.Fprintf(&b, "\n## %s (`%s`)\n\n%s\n\n| Panel | Question it answers | Query |\n|---|---|---|\n", d.Title, d.File, d.About)
		for _, p := range d.Panels {
			exprs := make([]string, 0, len(p.Queries))
			for _, qq := range p.Queries {
				exprs = append(exprs, "`"+strings.ReplaceAll(qq.Expr, "|", `\|`)+"`")
			}
			fmt.Fprintf(&b, "| %s | %s | %s |\n", p.Title, p.Question, strings.Join(exprs, "<br>"))
		}
	}
	return b.Bytes()
}
