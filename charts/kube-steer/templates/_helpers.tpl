{{/*
Helm's own labels, added to every object's metadata.labels (never to selectors or pod
templates, which must stay as in manifests/). tests/test_chart.py strips exactly these before
comparing the chart with the kustomize base.
*/}}
{{- define "kube-steer.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end }}

{{/* The image of every kube-steer process. */}}
{{- define "kube-steer.image" -}}
image: {{ printf "%s:%s" .Values.image.repository (toString .Values.image.tag) | quote }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/* The ConfigMap both services mount: the chart's own, or one the user made. */}}
{{- define "kube-steer.policyConfigMap" -}}
{{- .Values.policy.existingConfigMap | default "steer-policy" -}}
{{- end }}

{{/* The policy text: inline (text or map), else the starter policy. */}}
{{- define "kube-steer.policyText" -}}
{{- $inline := .Values.policy.inline -}}
{{- if kindIs "string" $inline -}}
{{- $inline -}}
{{- else if $inline -}}
{{- toYaml $inline -}}
{{- else -}}
{{- $starter := .Files.Get "files/starter-policy.yaml" -}}
{{- if .Values.schedulerProfiles.enabled -}}
{{- $starter = replace "    installed: false" "    installed: true" $starter -}}
{{- end -}}
{{- $starter -}}
{{- end -}}
{{- end }}

{{/*
"true" when the webhook is installed (admission.mode webhook or both), else empty. The check of
admission.mode against certManager.enabled lives here, so every template that asks sees it.
*/}}
{{- define "kube-steer.webhookInstalled" -}}
{{- if and (eq .Values.admission.mode "policy") .Values.certManager.enabled -}}
{{- fail "certManager.enabled needs the webhook: admission.mode policy installs no certificate" -}}
{{- end -}}
{{- if ne .Values.admission.mode "policy" -}}true{{- end -}}
{{- end }}

{{/* "true" when the controller's leader renews the webhook's certificate (--webhook-certs=renew). */}}
{{- define "kube-steer.controllerRenewsWebhookCerts" -}}
{{- if and (include "kube-steer.webhookInstalled" .) (not .Values.certManager.enabled) -}}true{{- end -}}
{{- end }}
