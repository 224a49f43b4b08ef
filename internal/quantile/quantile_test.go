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
