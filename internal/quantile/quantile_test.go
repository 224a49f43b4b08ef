package quantile

import "testing"

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{nil, 0.5, 0},
		{[]float64{3}, 0.9, 3},
		{[]float64{4, 1, 3, 2}, 0.5, 2.5},
		{[]float64{1, 2, 3, 4, 5}, 0.9, 4.6},
		{[]float64{5, 1}, 1, 5},
	} {
		if got := Of(tc.xs, tc.q); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("Of(%v, %v) = %v, want %v", tc.xs, tc.q, got, tc.want)
		}
	}
}

func TestFromBuckets(t *testing.T) {
	bounds := []float64{2, 5, 10, 20}
	for _, tc := range []struct {
		name       string
		cumulative []float64
		total, q   float64
		want       float64
	}{
		{"empty", []float64{0, 0, 0, 0}, 0, 0.5, 0},
		{"within the first bucket, from 0", []float64{4, 4, 4, 4}, 4, 0.5, 1},
		{"interpolated in its bucket", []float64{0, 2, 6, 6}, 6, 0.5, 6.25},
		{"at a bucket's top", []float64{0, 3, 6, 6}, 6, 0.5, 5},
		{"past the last bound", []float64{0, 0, 0, 1}, 2, 0.95, 20},
	} {
		if got := FromBuckets(bounds, tc.cumulative, tc.total, tc.q); got < tc.want-1e-9 || got > tc.want+1e-9 {
			t.Errorf("%s: FromBuckets = %v, want %v", tc.name, got, tc.want)
		}
	}
}
