{{/* The scrape endpoint shared by the ServiceMonitor and the PodMonitor; `.m` is its values. */}}
{{- define "zaroz-exporter.endpoint" -}}
{{- $m := .m }}
{{- $root := .root }}
{{- $https := include "zaroz-exporter.https" $root }}
path: /metrics
interval: {{ $m.interval }}
# The timeout must fit a full scrape: ~0.6 s per 1M series uncompressed, ~1.3 s gzipped.
scrapeTimeout: {{ $m.scrapeTimeout }}
scheme: {{ ternary "https" "http" (eq $https "true") }}
{{- if $m.honorLabels }}
honorLabels: true
{{- end }}
{{- if $m.tlsConfig }}
tlsConfig:
  {{- toYaml $m.tlsConfig | nindent 2 }}
{{- else if and (eq $https "true") (not $root.Values.webConfig.existingSecret) }}
tlsConfig:
  serverName: {{ printf "%s.%s.svc" (include "zaroz-exporter.fullname" $root) $root.Release.Namespace }}
  ca:
    secret:
      name: {{ include "zaroz-exporter.tlsSecret" $root }}
      key: ca.crt
{{- end }}
{{- with $m.basicAuth.secretName }}
basicAuth:
  username:
    name: {{ . }}
    key: {{ $m.basicAuth.usernameKey }}
  password:
    name: {{ . }}
    key: {{ $m.basicAuth.passwordKey }}
{{- end }}
{{- with $m.relabelings }}
relabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $m.metricRelabelings }}
metricRelabelings:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
