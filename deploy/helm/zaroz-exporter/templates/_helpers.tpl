{{/* Names, labels and the pieces the workload templates share. */}}

{{- define "zaroz-exporter.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "zaroz-exporter.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "zaroz-exporter.selectorLabels" -}}
app.kubernetes.io/name: {{ include "zaroz-exporter.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "zaroz-exporter.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "zaroz-exporter.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: zaroz-units
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "zaroz-exporter.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "zaroz-exporter.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "zaroz-exporter.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- $repo := .Values.image.repository }}
{{- with .Values.image.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end }}
{{- if .Values.image.digest }}
{{- printf "%s:%s@%s" $repo $tag .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo $tag }}
{{- end }}
{{- end }}

{{/* The state claim's spec: size, class and access modes, then persistence.volumeClaimTemplate
over them. */}}
{{- define "zaroz-exporter.claimSpec" -}}
{{- $p := .Values.persistence }}
{{- $spec := dict "accessModes" $p.accessModes "resources" (dict "requests" (dict "storage" $p.size)) }}
{{- with $p.storageClassName }}{{ $_ := set $spec "storageClassName" . }}{{ end }}
{{- with $p.volumeClaimTemplate.spec }}{{ $spec = mustMergeOverwrite $spec (deepCopy .) }}{{ end }}
{{- toYaml $spec }}
{{- end }}

{{/* The web config of /metrics in force: an operator's Secret, or one this chart renders. */}}
{{- define "zaroz-exporter.webConfigSecret" -}}
{{- if .Values.webConfig.existingSecret }}
{{- .Values.webConfig.existingSecret }}
{{- else if or .Values.webConfig.tls.enabled .Values.webConfig.basicAuth.users }}
{{- printf "%s-web-config" (include "zaroz-exporter.fullname" .) }}
{{- end }}
{{- end }}

{{- define "zaroz-exporter.tlsSecret" -}}
{{- default (printf "%s-tls" (include "zaroz-exporter.fullname" .)) .Values.webConfig.tls.secretName }}
{{- end }}

{{/* /metrics speaks TLS: probes and monitors use https (with an existingSecret web config
too, which then names its own certificates). */}}
{{- define "zaroz-exporter.https" -}}
{{- if .Values.webConfig.tls.enabled }}true{{ end }}
{{- end }}

{{- define "zaroz-exporter.stateDir" -}}/var/lib/zaroz-exporter{{- end }}

{{/* Refuse combinations that would run but be wrong, with one line naming the values. */}}
{{- define "zaroz-exporter.checks" -}}
{{- if and (gt (int .Values.replicas) 1) (not .Values.autosharding.enabled) }}
{{- fail "replicas > 1 needs autosharding.enabled=true: unsharded replicas would export every series twice" }}
{{- end }}
{{- if and .Values.metrics.allowlist .Values.metrics.denylist }}
{{- fail "metrics.allowlist and metrics.denylist are exclusive (the exporter refuses both)" }}
{{- end }}
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled }}
{{- fail "serviceMonitor.enabled and podMonitor.enabled together would scrape every pod twice: choose one" }}
{{- end }}
{{- if and .Values.webhook.ingress.enabled (not .Values.webhook.enabled) }}
{{- fail "webhook.ingress.enabled needs webhook.enabled (the Ingress routes to the webhook listener)" }}
{{- end }}
{{- if and .Values.webhook.ingress.enabled (not .Values.webhook.ingress.hosts) }}
{{- fail "webhook.ingress.hosts: name at least one host for the webhook Ingress" }}
{{- end }}
{{- if and .Values.webConfig.clientCA.enabled (not .Values.webConfig.tls.enabled) }}
{{- fail "webConfig.clientCA.enabled needs webConfig.tls.enabled (client certificates are a TLS feature)" }}
{{- end }}
{{- if and .Values.persistence.existingClaim .Values.autosharding.enabled }}
{{- fail "persistence.existingClaim is for a single pod: with autosharding each shard gets a claim of its own" }}
{{- end }}
{{- end }}
