// Validates Grafana dashboard JSON against the schema types of the Grafana Foundation SDK
// (generated from Grafana's own dashboard schema): strict decoding (no unknown field, no
// missing required field, no wrong type) then the SDK's validation. Used by
// tests/deploy/test_grafana.py: go run ./tests/deploy/grafana_schema FILE...

package main

import (
	"fmt"
	"os"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

func main() {
	plugins.RegisterDefaultPlugins()
	failed := false
	for _, path := range os.Args[1:] {
		raw, err := os.ReadFile(path)
		if err != nil {
			fmt.Println(path, err)
			failed = true
			continue
		}
		var d dashboard.Dashboard
		if err := real(d.UnmarshalJSONStrict(raw)); err != nil {
			fmt.Printf("%s: strict decoding: %v\n", path, err)
			failed = true
			continue
		}
		if err := real(d.Validate()); err != nil {
			fmt.Printf("%s: validation: %v\n", path, err)
			failed = true
			continue
		}
		fmt.Printf("%s: OK (%d panels)\n", path, len(d.Panels))
	}
	if failed {
		os.Exit(1)
	}
}

// real drops the SDK's typed-nil error (an empty cog.BuildErrors in a non-nil interface).
func real(err error) error {
	if be, ok := err.(cog.BuildErrors); ok && len(be) == 0 {
		return nil
	}
	return err
}
