// Package quantile summarises benchmark samples the same way everywhere.
package quantile

import "slices"

// Of is the q-quantile of xs, interpolated between the nearest ranks (so
// 0.5 of an even count is the mean of the middle two); 0 for none.
func Of(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	i := int(pos)
	if i+1 >= len(s) {
		return s[len(s)-1]
	}
	return s[i] + (pos-float64(i))*(s[i+1]-s[i])
}

// FromBuckets is the q-quantile of a histogram: bounds are its buckets'
// upper bounds, ascending, cumulative their cumulative counts, total its
// count. It interpolates linearly within the bucket the quantile falls in,
// as Prometheus's histogram_quantile does (the first bucket from 0); past
// the last bound it is that bound. 0 for an empty histogram.
func FromBuckets(bounds, cumulative []float64, total, q float64) float64 {
	if total <= 0 || len(bounds) == 0 || len(bounds) != len(cumulative) {
		return 0
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, upper := range bounds {
		if cumulative[i] >= rank {
			if cumulative[i] == below {
				return upper
			}
			return lower + (upper-lower)*(rank-below)/(cumulative[i]-below)
		}
		lower, below = upper, cumulative[i]
	}
	return bounds[len(bounds)-1]
}
