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

{{/* How this release chooses its namespaces: "all" (rbac.clusterWide), "list"
(watchNamespaces) or "labels" (namespaceLabels, the default). */}}
{{- define "pgsched.namespaceMode" -}}
{{- if .Values.rbac.clusterWide }}all
{{- else if .Values.watchNamespaces }}list
{{- else if .Values.namespaceLabels }}labels
{{- else }}
{{- fail "namespaceLabels and watchNamespaces are both empty: say which namespaces this release serves, e.g. --set namespaceLabels=pgsched.dev/serve=true (the default), --set watchNamespaces='{jobs}', or rbac.clusterWide=true." }}
{{- end }}
{{- end }}

{{/* Watched namespaces as a JSON list (use with fromJsonArray); [] unless the mode is
"list". Jobs run in them, so the release namespace is one only when the admin says so. */}}
{{- define "pgsched.watchNamespaces" -}}
{{- if eq (include "pgsched.namespaceMode" .) "list" }}
{{- if and (has .Release.Namespace .Values.watchNamespaces) (not .Values.allowReleaseNamespace) }}
{{- fail (printf "watchNamespaces includes the release namespace %s, where the operator's ServiceAccount and database Secret live: watch another namespace (e.g. --set watchNamespaces='{jobs}'), or set allowReleaseNamespace=true to run jobs beside the operator." .Release.Namespace) }}
{{- end }}
{{- .Values.watchNamespaces | uniq | toJson }}
{{- else }}
{{- list | toJson }}
{{- end }}
{{- end }}

{{/* namespaceLabels as a map (use with fromJson): the key=value pairs of the string. */}}
{{- define "pgsched.namespaceLabelMap" -}}
{{- $labels := dict }}
{{- range $pair := splitList "," .Values.namespaceLabels }}
{{- $parts := splitn "=" 2 (trim $pair) }}
{{- $_ := set $labels (trim $parts._0) (trim (default "" $parts._1)) }}
{{- end }}
{{- $labels | toJson }}
{{- end }}

{{/* namespaceLabels as a label selector: key=value,... (sorted by key). */}}
{{- define "pgsched.namespaceSelector" -}}
{{- $pairs := list }}
{{- range $key, $value := include "pgsched.namespaceLabelMap" . | fromJson }}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/* CEL, in an admission policy: whether the request's namespace is one this release
serves (for a namespaced request; namespaceObject is the Namespace). */}}
{{- define "pgsched.servedCel" -}}
{{- $mode := include "pgsched.namespaceMode" . }}
{{- if eq $mode "all" }}true
{{- else if eq $mode "list" }}request.namespace in {{ include "pgsched.watchNamespaces" . }}
{{- else }}
{{- $checks := list }}
{{- range $key, $value := include "pgsched.namespaceLabelMap" . | fromJson }}
{{- $checks = append $checks (printf "namespaceObject.metadata.?labels[?%s].orValue('') == %s" (squote $key) (squote $value)) }}
{{- end }}
{{- join " && " $checks }}
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

{{/* The address job pods are given for the run API (docs/run-api.md): runApi.url, else
its Service's name, which every cluster DNS resolves from any namespace. */}}
{{- define "pgsched.runApiUrl" -}}
{{- default (printf "https://%s-run-api.%s.svc" (include "pgsched.fullname" .) .Release.Namespace) .Values.runApi.url }}
{{- end }}

{{/*
An HTTPS server every operator replica runs, behind one Service: the admission webhook
(templates/webhook.yaml) and the run API (templates/run-api.yaml). Renders the Service
<fullname>-<name> (port 443 to the pods' port named <name>) and the server's certificate,
in the Secret <fullname>-<name>-tls (tls.crt, tls.key, ca.crt: what the operator mounts).

Without cert-manager the chart makes a CA and a serving certificate for the Service's names,
valid ten years, and keeps them across upgrades (the Secret is looked up first): a new CA
on every upgrade would cut off whoever trusts the old one. With cert-manager: the serving
Certificate is signed by a CA of its own (a CA Certificate from a self-signed Issuer, and a
CA Issuer), or by certManager.issuerRef; either way ca.crt is a CA that outlives the
serving certificate's renewals. It must: job pods are given ca.crt when they start, and the
operator reads it once.

Takes a dict: "root" (the chart's context), "name", "certManager" ({enabled, issuerRef}),
and optionally "dnsNames" and "ipAddresses" besides the Service's names. Sets "caBundle" in
that dict (base64 ca.crt of the chart's own certificate; empty with cert-manager) for the
template that includes it.
*/}}
{{- define "pgsched.tlsServer" -}}
{{- $root := .root }}
{{- $fullname := include "pgsched.fullname" $root }}
{{- $namespace := $root.Release.Namespace }}
{{- $service := printf "%s-%s" $fullname .name }}
{{- $secret := printf "%s-tls" $service }}
{{- $hosts := concat (list $service (printf "%s.%s" $service $namespace) (printf "%s.%s.svc" $service $namespace)) (.dnsNames | default list) | uniq }}
{{- $ips := .ipAddresses | default list }}
{{- $labels := include "pgsched.labels" $root }}
apiVersion: v1
kind: Service
metadata:
  name: {{ $service }}
  namespace: {{ $namespace }}
  labels:
    {{- $labels | nindent 4 }}
spec:
  type: ClusterIP
  selector:
    {{- include "pgsched.selectorLabels" $root | nindent 4 }}
  ports:
    - name: {{ .name }}
      port: 443
      targetPort: {{ .name }}
      protocol: TCP
---
{{- if .certManager.enabled }}
{{- if not .certManager.issuerRef }}
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: {{ $service }}-selfsigned
  namespace: {{ $namespace }}
  labels:
    {{- $labels | nindent 4 }}
spec:
  selfSigned: {}
---
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: {{ $service }}-ca
  namespace: {{ $namespace }}
  labels:
    {{- $labels | nindent 4 }}
spec:
  isCA: true
  commonName: {{ $service }}-ca
  secretName: {{ $service }}-ca
  duration: 87600h
  issuerRef:
    kind: Issuer
    name: {{ $service }}-selfsigned
---
apiVersion: cert-manager.io/v1
kind: Issuer
metadata:
  name: {{ $service }}
  namespace: {{ $namespace }}
  labels:
    {{- $labels | nindent 4 }}
spec:
  ca:
    secretName: {{ $service }}-ca
---
{{- end }}
apiVersion: cert-manager.io/v1
kind: Certificate
metadata:
  name: {{ $service }}
  namespace: {{ $namespace }}
  labels:
    {{- $labels | nindent 4 }}
spec:
  secretName: {{ $secret }}
  dnsNames:
    {{- toYaml $hosts | nindent 4 }}
  {{- with $ips }}
  ipAddresses:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  issuerRef:
    {{- if .certManager.issuerRef }}
    {{- toYaml .certManager.issuerRef | nindent 4 }}
    {{- else }}
    kind: Issuer
    name: {{ $service }}
    {{- end }}
{{- else }}
{{- $existing := lookup "v1" "Secret" $namespace $secret }}
{{- $data := dict }}
{{- if and $existing (index ($existing.data | default dict) "tls.crt") }}
{{- $data = $existing.data }}
{{- else }}
{{- $ca := genCA (printf "%s-ca" $service) 3650 }}
{{- $cert := genSignedCert (printf "%s.%s.svc" $service $namespace) $ips $hosts 3650 $ca }}
{{- $data = dict "ca.crt" ($ca.Cert | b64enc) "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc) }}
{{- end }}
{{- $_ := set . "caBundle" (index $data "ca.crt") }}
apiVersion: v1
kind: Secret
metadata:
  name: {{ $secret }}
  namespace: {{ $namespace }}
  labels:
    {{- $labels | nindent 4 }}
type: kubernetes.io/tls
data:
  {{- toYaml $data | nindent 2 }}
{{- end }}
{{- end }}
