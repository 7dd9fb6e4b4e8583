// Program otelcol-ragengine is an OpenTelemetry Collector with only what the tests need: the OTLP
// receiver (gRPC and HTTP) and the file exporter. Written the way the collector's builder (ocb)
// generates a distribution's main (cmd/builder/internal/builder/templates at the pinned version).
package main

import (
	"os"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	envprovider "go.opentelemetry.io/collector/confmap/provider/envprovider"
	fileprovider "go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/otelcol"
)

func main() {
	set := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "otelcol-ragengine",
			Description: "OpenTelemetry Collector for ragengine's tests: OTLP receiver, file exporter",
			Version:     "dev",
		},
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				ProviderFactories: []confmap.ProviderFactory{envprovider.NewFactory(), fileprovider.NewFactory()},
			},
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		os.Exit(1) // cobra has logged the error
	}
}
