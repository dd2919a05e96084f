// The zaroz units exporter's monitoring mixin (the kubernetes-mixin convention):
// `_config+::` to configure, `prometheusAlerts`, `prometheusRules` and `grafanaDashboards` out.
// Everything but this file and lib/format.libsonnet is generated (python -m tools.mixin).
(import 'config.libsonnet') +
(import 'alerts/alerts.libsonnet') +
(import 'rules/rules.libsonnet') +
(import 'dashboards/dashboards.libsonnet')
