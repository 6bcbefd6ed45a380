{{/*
The chart name, or nameOverride; cut to 63 characters (the DNS label limit of Kubernetes names).
*/}}
{{- define "floe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of the objects: fullnameOverride, else the release name followed by the chart
name unless the release name already contains it. Cut to 63 characters.
*/}}
{{- define "floe.fullname" -}}
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

{{/*
Chart name and version, for the helm.sh/chart label.
*/}}
{{- define "floe.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object the chart creates.
*/}}
{{- define "floe.labels" -}}
helm.sh/chart: {{ include "floe.chart" . }}
{{ include "floe.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: floe
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
Labels that select the operator pods; never change them after a release exists (a
Deployment's selector is immutable).
*/}}
{{- define "floe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "floe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The operator's ServiceAccount.
*/}}
{{- define "floe.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "floe.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The operator image: repository@digest when a digest is set, else repository:tag (the
chart's appVersion by default).
*/}}
{{- define "floe.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
Whether the operator watches a list of namespaces ("true") or the whole cluster ("").
*/}}
{{- define "floe.namespaced" -}}
{{- if .Values.operator.watchNamespaces }}true{{ end }}
{{- end }}

{{/*
Checks that values which are each valid make sense together; fails the render otherwise.
*/}}
{{- define "floe.validate" -}}
{{- $le := .Values.leaderElection }}
{{- if and $le.enabled .Values.peering.enabled }}
{{- fail "leaderElection.enabled and peering.enabled exclude each other: choose one way for the operator pods to pick the one that works (leaderElection fences a pod that lost its Lease; Kopf peering has no fencing)" }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) (not $le.enabled) (not .Values.peering.enabled) }}
{{- fail "replicaCount > 1 needs leaderElection.enabled=true (or peering.enabled=true), or every operator pod would handle every app" }}
{{- end }}
{{- if and $le.enabled (not (and (gt (float64 $le.leaseDurationSeconds) (float64 $le.renewDeadlineSeconds)) (gt (float64 $le.renewDeadlineSeconds) (float64 $le.retryPeriodSeconds)))) }}
{{- fail "leaderElection needs leaseDurationSeconds > renewDeadlineSeconds > retryPeriodSeconds, so that a leader stops before a standby may take over" }}
{{- end }}
{{- end }}
