{{/* The chart's name, and the name of every object it makes (the release's name when it holds the chart's). */}}
{{- define "apf-monitor.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "apf-monitor.fullname" -}}
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

{{- define "apf-monitor.selectorLabels" -}}
app.kubernetes.io/name: {{ include "apf-monitor.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "apf-monitor.labels" -}}
{{ include "apf-monitor.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "apf-monitor.serviceAccountName" -}}
{{- default (include "apf-monitor.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/* The Secret that holds the HTTPS listener's certificate (tls.crt, tls.key, ca.crt). */}}
{{- define "apf-monitor.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "apf-monitor.fullname" .)) .Values.tls.secretName }}
{{- end }}

{{/* Where the pod mounts it. */}}
{{- define "apf-monitor.tlsDir" -}}/etc/apf-monitor-tls{{- end }}

{{/* The Service's in-cluster name, which the certificate and external_url name. */}}
{{- define "apf-monitor.serviceHost" -}}
{{- printf "%s.%s.svc" (include "apf-monitor.fullname" .) .Release.Namespace }}
{{- end }}

{{/*
The daemon's config: `config` as given, with what the chart knows filled in where it is not set: the listen
address (the container's port), web.tls (the mounted Secret) with tls.enabled, alerting.external_url (the Service)
and the Lease's name (after the release, so that shards in one namespace each hold their own); and `shard` in every
`targets.prometheus` entry that names none. A key given in `config` always wins.
*/}}
{{- define "apf-monitor.config" -}}
{{- $fullname := include "apf-monitor.fullname" . }}
{{- $scheme := ternary "https" "http" .Values.tls.enabled }}
{{- $known := dict
  "listen" (printf "0.0.0.0:%v" .Values.port)
  "alerting" (dict
    "external_url" (printf "%s://%s:%v" $scheme (include "apf-monitor.serviceHost" .) .Values.port)
    "leader_election" (dict "lease_name" (printf "%s-notifier" $fullname))) }}
{{- if .Values.tls.enabled }}
{{- $dir := include "apf-monitor.tlsDir" . }}
{{- $_ := set $known "web" (dict "tls" (dict "cert_file" (printf "%s/tls.crt" $dir) "key_file" (printf "%s/tls.key" $dir))) }}
{{- end }}
{{- $config := mergeOverwrite $known (deepCopy (.Values.config | default dict)) }}
{{- if .Values.shard }}
{{- range (dig "targets" "prometheus" list $config) }}
{{- if not (hasKey . "shard") }}
{{- $_ := set . "shard" (deepCopy $.Values.shard) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $config }}
{{- end }}

{{/* The replicas are read from a Prometheus (the fleet mode): no apiserver is scraped, nor its replicas discovered. */}}
{{- define "apf-monitor.fleet" -}}
{{- if dig "targets" "prometheus" list (include "apf-monitor.config" . | fromYaml) }}true{{ end }}
{{- end }}

{{/* The Lease only the notifier holds (alerting.leader_election), when leader election is on. */}}
{{- define "apf-monitor.leaseName" -}}
{{- $le := dig "alerting" "leader_election" dict (include "apf-monitor.config" . | fromYaml) }}
{{- if $le.enabled }}{{ $le.lease_name }}{{ end }}
{{- end }}
