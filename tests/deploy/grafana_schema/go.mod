module fairnessmonitor/grafanaschema

go 1.22

require github.com/grafana/grafana-foundation-sdk/go v0.0.22
