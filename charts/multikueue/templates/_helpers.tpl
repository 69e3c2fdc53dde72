{{/* The configuration document, with dispatcher.namespace defaulted to the release's namespace. */}}
{{- define "multikueue.config" -}}
{{- $config := .Values.managerConfig.controllerManagerConfigYaml | fromYaml -}}
{{- $dispatcher := get $config "dispatcher" | default dict -}}
{{- if not (hasKey $dispatcher "namespace") -}}
{{- $_ := set $dispatcher "namespace" .Release.Namespace -}}
{{- end -}}
{{- $_ := set $config "dispatcher" $dispatcher -}}
{{- toYaml $config -}}
{{- end -}}

{{/* Each configured kind as a dict: kind, version, group, plural, integrated (an `integration` section). */}}
{{- define "multikueue.kinds" -}}
{{- $config := include "multikueue.config" . | fromYaml -}}
{{- $integrated := dict -}}
{{- range (get (get $config "dispatcher") "adapters" | default list) -}}
{{- if .integration -}}{{- $_ := set $integrated .name true -}}{{- end -}}
{{- end -}}
{{- $kinds := list -}}
{{- range (get (get $config "multiKueue" | default dict) "externalFrameworks" | default list) -}}
{{- $parts := splitList "." .name -}}
{{- $kind := first $parts -}}
{{- $group := rest (rest $parts) | join "." -}}
{{- $plural := get $.Values.rbac.plurals .name | default (printf "%ss" (lower $kind)) -}}
{{- $kinds = append $kinds (dict "name" .name "kind" $kind "version" (index $parts 1) "group" $group "plural" $plural "integrated" (hasKey $integrated .name)) -}}
{{- end -}}
{{- toYaml (dict "kinds" $kinds) -}}
{{- end -}}

{{- define "multikueue.labels" -}}
app.kubernetes.io/name: multikueue
{{- end -}}
