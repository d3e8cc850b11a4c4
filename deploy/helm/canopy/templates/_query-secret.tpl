{{/* The projectors' query endpoint's shared secret: the projector requires
     it of every read (-query-secret-file), the gateway presents it
     (-projector-secret-file). One Secret, mounted read-only into both. */}}

{{/* The Secret: querySecret.existingSecret, or the one the chart creates. */}}
{{- define "canopy.querySecret.name" -}}
{{- if .Values.querySecret.existingSecret -}}
{{- .Values.querySecret.existingSecret -}}
{{- else -}}
{{- printf "%s-query-secret" (include "canopy.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Where the secret's file is in a pod. */}}
{{- define "canopy.querySecret.path" -}}
/etc/canopy/query-secret/{{ .Values.querySecret.key }}
{{- end -}}

{{- define "canopy.querySecret.volumeMount" -}}
- name: query-secret
  mountPath: /etc/canopy/query-secret
  readOnly: true
{{- end -}}

{{- define "canopy.querySecret.volume" -}}
- name: query-secret
  secret:
    secretName: {{ include "canopy.querySecret.name" . }}
    items:
      - key: {{ .Values.querySecret.key }}
        path: {{ .Values.querySecret.key }}
{{- end -}}
