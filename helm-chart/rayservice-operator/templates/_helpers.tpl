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

{{- define "rayservice-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rayservice-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end }}

{{- define "rayservice-operator.labels" -}}
helm.sh/chart: {{ include "rayservice-operator.chart" . }}
{{ include "rayservice-operator.selectorLabels" . }}
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
empty for all of them (then a ClusterRole grants the rules).
*/}}
{{- define "rayservice-operator.watchNamespaces" -}}
{{- if .Values.singleNamespaceInstall }}
{{- .Release.Namespace }}
{{- else }}
{{- .Values.watchNamespace | default list | uniq | sortAlpha | join "," }}
{{- end }}
{{- end }}
