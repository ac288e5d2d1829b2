{{/* Chart name, truncated to the 63 characters of a label value. */}}
{{- define "nri-plrm.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name of the release's objects. */}}
{{- define "nri-plrm.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "nri-plrm.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "nri-plrm.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nri-plrm.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nri-plrm.labels" -}}
{{ include "nri-plrm.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: node-agent
app.kubernetes.io/part-of: nri-plrm
app.kubernetes.io/managed-by: {{ default .Release.Service .Values.managedBy }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "nri-plrm.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "nri-plrm.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
A JSON literal that is also valid TOML and YAML text: toJson leaves U+007F..U+009F raw, which
neither allows, so they are escaped as \u00XX too.
*/}}
{{- define "nri-plrm.json" -}}
{{- $text := toJson . -}}
{{- range $i := until 33 -}}
{{- $code := add 127 $i -}}
{{- $text = replace (printf "%c" $code) (printf "\\u%04x" $code) $text -}}
{{- end -}}
{{- $text -}}
{{- end -}}

{{/* A TOML key: bare when it can be, else quoted. */}}
{{- define "nri-plrm.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" . -}}
{{- . -}}
{{- else -}}
{{- include "nri-plrm.json" . -}}
{{- end -}}
{{- end -}}

{{/*
One TOML value: maps become inline tables, lists arrays, scalars JSON literals (a JSON string,
number or boolean is also a valid TOML one). Null map entries are left out.
*/}}
{{- define "nri-plrm.tomlValue" -}}
{{- if kindIs "map" . -}}
{{- $items := list -}}
{{- range $key, $value := . -}}
{{- if not (kindIs "invalid" $value) -}}
{{- $items = append $items (printf "%s = %s" (include "nri-plrm.tomlKey" $key) (include "nri-plrm.tomlValue" $value)) -}}
{{- end -}}
{{- end -}}
{{- printf "{ %s }" (join ", " $items) -}}
{{- else if kindIs "slice" . -}}
{{- $items := list -}}
{{- range . -}}
{{- $items = append $items (include "nri-plrm.tomlValue" .) -}}
{{- end -}}
{{- printf "[%s]" (join ", " $items) -}}
{{- else -}}
{{- include "nri-plrm.json" . -}}
{{- end -}}
{{- end -}}

{{/* config.toml: one [table] per key of .Values.config, one line per setting. */}}
{{- define "nri-plrm.configToml" -}}
# nri-plrm configuration, rendered from the Helm values (config.*); see docs/config.md.
{{- range $table, $settings := .Values.config }}

[{{ include "nri-plrm.tomlKey" $table }}]
{{- range $key, $value := $settings }}
{{- if not (kindIs "invalid" $value) }}
{{ include "nri-plrm.tomlKey" $key }} = {{ include "nri-plrm.tomlValue" $value }}
{{- end }}
{{- end }}
{{- end }}
{{- end -}}

{{/*
The /metrics and /healthz port, from config.metrics.address. The kubelet probes the pod's IP,
so the plugin must listen on all addresses there.
*/}}
{{- define "nri-plrm.metricsPort" -}}
{{- $address := .Values.config.metrics.address | default "" | toString -}}
{{- $port := regexFind "[0-9]+$" $address -}}
{{- $host := trimSuffix (printf ":%s" $port) $address | trimAll "[]" -}}
{{- if or (not $port) (not (hasSuffix (printf ":%s" $port) $address)) -}}
{{- fail (printf "config.metrics.address: %q: must be host:port; the DaemonSet's probes need /healthz" $address) -}}
{{- end -}}
{{- if not (has $host (list "0.0.0.0" "::" "")) -}}
{{- fail (printf "config.metrics.address: %q: must listen on all addresses (0.0.0.0:PORT or [::]:PORT): the kubelet probes the pod IP" $address) -}}
{{- end -}}
{{- $port -}}
{{- end -}}

{{/*
The container path of the kubelet-format export (config.state.kubelet_state_dir), "" when off.
The render fails when the export would land on the kubelet's own state files: the host directory
is hostPaths.kubeletDir or inside it, or the container path is the directory of
config.state.kubelet_cpu_manager_state (or inside it), or another mount's path.
*/}}
{{- define "nri-plrm.kubeletStateExport" -}}
{{- $dir := .Values.config.state.kubelet_state_dir | default "" | toString -}}
{{- if $dir -}}
{{- $why := "a kubelet running with its managers set to none refuses to start at its next restart when the plugin's static-policy cpu_manager_state/memory_manager_state replace its own (configured policy \"none\" differs from state checkpoint policy \"static\"); export to a directory of its own (docs/config.md)" -}}
{{- if not (hasPrefix "/" $dir) -}}
{{- fail (printf "config.state.kubelet_state_dir: %q: must be an absolute path, or \"\" to turn it off" $dir) -}}
{{- end -}}
{{- $dir = clean $dir -}}
{{- $host := clean .Values.hostPaths.kubeletStateExportDir -}}
{{- $kubelet := clean .Values.hostPaths.kubeletDir -}}
{{- if or (eq $host $kubelet) (hasPrefix (printf "%s/" $kubelet) $host) -}}
{{- fail (printf "hostPaths.kubeletStateExportDir: %q: is the kubelet's directory (hostPaths.kubeletDir %q) or inside it: %s" $host $kubelet $why) -}}
{{- end -}}
{{- $state := .Values.config.state.kubelet_cpu_manager_state | default "" | toString -}}
{{- if $state -}}
{{- $kubeletView := dir (clean $state) -}}
{{- if or (eq $dir $kubeletView) (hasPrefix (printf "%s/" $kubeletView) $dir) -}}
{{- fail (printf "config.state.kubelet_state_dir: %q: is the directory of config.state.kubelet_cpu_manager_state (%q) or inside it: %s" $dir $kubeletView $why) -}}
{{- end -}}
{{- end -}}
{{- $taken := list "/etc/nri-plrm" "/var/run/nri" (clean .Values.config.state.dir) "/host/sys" "/tmp" (clean .Values.hostPaths.containerdConfigDir) -}}
{{- if has $dir $taken -}}
{{- fail (printf "config.state.kubelet_state_dir: %q: another volume is mounted there; the export needs a directory of its own" $dir) -}}
{{- end -}}
{{- $dir -}}
{{- end -}}
{{- end -}}
