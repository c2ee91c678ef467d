package upgrade

import "time"

// firstSeen remembers when this agent first saw each claim an object
// makes (a lease's renewal, a Job's creation), by this agent's clock. A
// signal counts from the earlier of the time it claims and the time it
// was first seen: a time in the future counts as now, so whoever may
// write a Lease or a Job in kube-system cannot date it ahead and hold
// every node's window for as long as they like.
type firstSeen map[string]claim

type claim struct{ claimed, seen time.Time }

// since is when key's claim of claimed counts from at now. A new claim
// for key (a renewal) is seen afresh.
func (f firstSeen) since(key string, claimed, now time.Time) time.Time {
	c, ok := f[key]
	if !ok || !c.claimed.Equal(claimed) {
		c = claim{claimed: claimed, seen: now}
		f[key] = c
	}
	if claimed.Before(c.seen) {
		return claimed
	}
	return c.seen
}

// keep forgets the keys live does not hold: objects deleted.
func (f firstSeen) keep(live map[string]bool) {
	for k := range f {
		if !live[k] {
			delete(f, k)
		}
	}
}
