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
