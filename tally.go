package dlock

// tally groups items (one round's renewals that failed, or writes too few
// replicas acknowledged) by same, in the order each group first appears:
// a fault that many locks share is logged once per round, with the
// number of locks, not once per lock.
func tally[T any](items []T, same func(T) string) []tallied[T] {
	if len(items) == 0 {
		return nil
	}
	var groups []tallied[T]
	at := make(map[string]int)
	for _, it := range items {
		k := same(it)
		i, ok := at[k]
		if !ok {
			i = len(groups)
			at[k] = i
			groups = append(groups, tallied[T]{first: it})
		}
		groups[i].n++
	}
	return groups
}

// tallied is one group of tally: its first item, and how many it has.
type tallied[T any] struct {
	first T
	n     int
}
