package devicefp

import (
	"net/http/httptest"
	"testing"
)

// BenchmarkScrape is the cost of one scrape of the device plugin's metrics
// endpoint on a dgxh100 with MIG on all 8 GPUs, 7 × 1g.10gb each (56
// devices): gathering (one telemetry read per MIG instance), encoding and
// writing the response, as Prometheus asks for it (gzip) and as plain
// text. Reported, never asserted: ns/op and the response's bytes/scrape.
func BenchmarkScrape(b *testing.B) {
	for _, enc := range []string{"text", "gzip"} {
		b.Run("MIG56/"+enc, func(b *testing.B) {
			p := benchPlugin(b, benchLayouts[0].edit)
			h := p.metrics.exp.Handler()
			req := httptest.NewRequest("GET", "/metrics", nil)
			if enc == "gzip" {
				req.Header.Set("Accept-Encoding", "gzip")
			}
			var size int
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 200 {
					b.Fatalf("scrape: %d %s", rec.Code, rec.Body)
				}
				size = rec.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/scrape")
		})
	}
}
