{{/* Names, labels and the values every template derives from. */}}

{{- define "pgsched.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* "<release>-pgsched", or the release name alone when it already contains the chart name. */}}
{{- define "pgsched.fullname" -}}
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

{{- define "pgsched.selectorLabels" -}}
app.kubernetes.io/name: {{ include "pgsched.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "pgsched.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "pgsched.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: pgsched
{{- end }}

{{- define "pgsched.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "pgsched.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image reference: the digest wins over the tag; the tag defaults to appVersion. */}}
{{- define "pgsched.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Watched namespaces as a JSON list (use with fromJsonArray); [] in cluster-wide mode.
Jobs run in them, so the release namespace is one only when the admin says so. */}}
{{- define "pgsched.watchNamespaces" -}}
{{- if .Values.rbac.clusterWide }}
{{- list | toJson }}
{{- else }}
{{- if not .Values.watchNamespaces }}
{{- fail (printf "watchNamespaces is empty: name the namespaces whose ScheduledJobs this release serves, e.g. --set watchNamespaces='{jobs}' (or rbac.clusterWide=true). Jobs do not run in the release namespace %s unless allowReleaseNamespace=true." .Release.Namespace) }}
{{- end }}
{{- if and (has .Release.Namespace .Values.watchNamespaces) (not .Values.allowReleaseNamespace) }}
{{- fail (printf "watchNamespaces includes the release namespace %s, where the operator's ServiceAccount and database Secret live: watch another namespace (e.g. --set watchNamespaces='{jobs}'), or set allowReleaseNamespace=true to run jobs beside the operator." .Release.Namespace) }}
{{- end }}
{{- .Values.watchNamespaces | uniq | toJson }}
{{- end }}
{{- end }}

{{- define "pgsched.databaseSecretName" -}}
{{- default (printf "%s-database" (include "pgsched.fullname" .)) .Values.database.secretName }}
{{- end }}

{{/* The /tmp emptyDir mount every container gets (HOME and TMPDIR of the image). */}}
{{- define "pgsched.tmpMount" -}}
- name: tmp
  mountPath: /tmp
{{- end }}

{{/* The operator's database connection string: a file from its Secret (pgsched.db.dsn),
never an environment variable, which the pod spec and /proc would show. */}}
{{- define "pgsched.dsnEnv" -}}
- name: PGSCHED_DSN_FILE
  value: /etc/pgsched/database/dsn
{{- end }}

{{- define "pgsched.dsnMount" -}}
- name: database
  mountPath: /etc/pgsched/database
  readOnly: true
{{- end }}

{{/* Probe timing fields from values, on /healthz of the health port. */}}
{{- define "pgsched.probe" -}}
httpGet:
  path: /healthz
  port: health
{{- toYaml . | nindent 0 }}
{{- end }}
