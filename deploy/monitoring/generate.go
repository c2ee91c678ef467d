// Package monitoring holds what operators apply to watch skewgate through
// an upgrade window: alerting rules (alerts.yaml, and prometheusrule.yaml
// generated from it for prometheus-operator). Its tests check the rules
// with promtool and that the generated file is current.
package monitoring

//go:generate go run ./cmd/prometheusrule -in alerts.yaml -out prometheusrule.yaml
