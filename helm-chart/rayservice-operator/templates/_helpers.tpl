{{/* The chart's name (nameOverride wins). */}}
{{- define "rayservice-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name, the base of every object name (fullnameOverride wins; a
release name that already contains the chart's name is used as it is).
*/}}
{{- define "rayservice-operator.fullname" -}}
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

{{- define "rayservice-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The Deployment's selector: name and instance, as in KubeRay's chart (so the component
label, and any extra label, can change without recreating the Deployment).
*/}}
{{- define "rayservice-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rayservice-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "rayservice-operator.labels" -}}
helm.sh/chart: {{ include "rayservice-operator.chart" . }}
{{ include "rayservice-operator.selectorLabels" . }}
app.kubernetes.io/component: {{ .Values.componentOverride | default "manager" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rayservice-operator
{{- end }}

{{- define "rayservice-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rayservice-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The namespaces the operator watches, comma-separated, sorted, without duplicates;
empty for all of them (then a ClusterRole grants the rules). watchNamespace wins;
singleNamespaceInstall alone means the release's namespace (KubeRay's precedence).
*/}}
{{- define "rayservice-operator.watchNamespaces" -}}
{{- if .Values.watchNamespace }}
{{- .Values.watchNamespace | uniq | sortAlpha | join "," }}
{{- else if .Values.singleNamespaceInstall }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
The labels of the Deployment and its ConfigMap: the chart's, then `labels` (the
chart's win a clash, so the selector always matches).
*/}}
{{- define "rayservice-operator.objectLabels" -}}
{{- $labels := include "rayservice-operator.labels" . | fromYaml }}
{{- toYaml (merge $labels (.Values.labels | default dict)) }}
{{- end }}

{{/* The pod's labels: the chart's, then podLabels, then labels. */}}
{{- define "rayservice-operator.podLabels" -}}
{{- $labels := include "rayservice-operator.labels" . | fromYaml }}
{{- toYaml (merge $labels (.Values.podLabels | default dict) (.Values.labels | default dict)) }}
{{- end }}

{{/* `--feature-gates=A=true,B=false` from featureGates; empty without gates. */}}
{{- define "rayservice-operator.featureGates" -}}
{{- $gates := list }}
{{- range .Values.featureGates }}
{{- $gates = append $gates (printf "%s=%t" .name .enabled) }}
{{- end }}
{{- with $gates }}--feature-gates={{ join "," . }}{{ end }}
{{- end }}

{{/* <baseDir>/<fileName> when logging to a file is asked for, else empty. */}}
{{- define "rayservice-operator.logFile" -}}
{{- if and .Values.logging.baseDir .Values.logging.fileName }}
{{- printf "%s/%s" (.Values.logging.baseDir | trimSuffix "/") .Values.logging.fileName }}
{{- end }}
{{- end }}

{{/*
Fails the render when a batch scheduler is asked for: none is integrated, and the
manager would only exit at start-up (`--batch-scheduler` exits 2), crash-looping. Also a
ServiceMonitor without metrics, and a NetworkPolicy that would refuse the webhook calls.
*/}}
{{- define "rayservice-operator.checkValues" -}}
{{- $scheduler := .Values.batchScheduler | default dict }}
{{- if or $scheduler.enabled $scheduler.name }}
{{- fail (printf "batchScheduler (enabled=%v, name=%q): no batch scheduler is integrated in rayservice-operator; unset batchScheduler.enabled and batchScheduler.name (pods are then scheduled by the default scheduler)" ($scheduler.enabled | default false) ($scheduler.name | default "")) }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled: with metrics disabled the manager serves no /metrics and the chart creates no metrics Service" }}
{{- end }}
{{- $policy := .Values.networkPolicy | default dict }}
{{- if and $policy.enabled .Values.webhooks.enabled (not $policy.apiServerCIDRs) }}
{{- fail "networkPolicy.enabled with webhooks.enabled needs networkPolicy.apiServerCIDRs: the addresses the API server calls the webhooks from (the control-plane nodes' IPs, or your provider's control-plane range); without them the policy would refuse every webhook call, and with failurePolicy Fail every RayCluster, RayService, RayJob and RayCronJob write" }}
{{- end }}
{{- end }}

{{/*
"true" when /metrics is served with --metrics-secure (metrics.enabled and metrics.secure.enabled).
*/}}
{{- define "rayservice-operator.metricsSecure" -}}
{{- if and .Values.metrics.enabled (.Values.metrics.secure | default dict).enabled }}true{{ end }}
{{- end }}

{{/*
The Secret of the metrics server's certificate (metrics.secure.certSecret) when /metrics is
secure with one; empty for a self-signed certificate (or plain metrics).
*/}}
{{- define "rayservice-operator.metricsCertSecret" -}}
{{- if include "rayservice-operator.metricsSecure" . }}{{ (.Values.metrics.secure | default dict).certSecret }}{{ end }}
{{- end }}

{{/* The Secret with the webhook server's tls.crt and tls.key (webhooks.secretName). */}}
{{- define "rayservice-operator.webhookSecret" -}}
{{- .Values.webhooks.secretName | default (printf "%s-webhook-server-cert" (include "rayservice-operator.fullname" .)) }}
{{- end }}
