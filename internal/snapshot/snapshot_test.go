package snapshot

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func fixture() Panel {
	start := time.Unix(1700000000, 0)
	var ss []Series
	for i := 0; i < 10; i++ {
		s := Series{Label: Legend("{{host}} {{device_id}}", map[string]string{"host": "gpu-1", "device_id": "GPU-0123456789abcdef-" + string(rune('a'+i))})}
		for k := 0; k <= 36; k++ {
			s.Points = append(s.Points, Point{T: start.Add(time.Duration(k) * 5 * time.Second), V: float64(i+1) * 8 * (1 + math.Sin(float64(k)/5)) / 2})
		}
		ss = append(ss, s)
	}
	return Panel{Title: "GPU utilisation", Unit: "percent", Start: start, Series: ss}
}

func TestRenderPNG(t *testing.T) {
	var buf bytes.Buffer
	if err := Render(&buf, fixture()); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() != Width || b.Dy() != Height {
		t.Fatalf("size %dx%d, want %dx%d", b.Dx(), b.Dy(), Width, Height)
	}
	if d := os.Getenv("SNAPSHOT_FIXTURE_OUT"); d != "" {
		if err := WriteFile(filepath.Join(d, "fixture.png"), fixture()); err != nil {
			t.Fatal(err)
		}
	}
	// Empty panels render too.
	if err := Render(&buf, Panel{Title: "empty", Unit: "bytes", Start: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

func TestLegendSlugAndLimit(t *testing.T) {
	if got := Legend("allocated {{pool}} {{ device }}", map[string]string{"pool": "default", "device": "nvidia/gpu"}); got != "allocated default nvidia/gpu" {
		t.Errorf("Legend = %q", got)
	}
	if got := Legend("", map[string]string{"__name__": "x", "b": "2", "a": "1"}); got != "a=1 b=2" {
		t.Errorf("Legend without format = %q", got)
	}
	if got := Slug("Fragmentation (stranded share of free capacity)"); got != "fragmentation-stranded-share-of-free-capacity" {
		t.Errorf("Slug = %q", got)
	}
	ss := keepLargest(fixture().Series, MaxSeries)
	if len(ss) != MaxSeries || ss[0].Label != fixture().Series[2].Label {
		t.Errorf("keepLargest kept %d, first %q", len(ss), ss[0].Label)
	}
}
