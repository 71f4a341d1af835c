package coord

// Next returns the commands due at time now, in a fixed order (groups by
// name, members by id): an Expire for every member whose session has ended
// or whose earliest revocation is past its deadline. The driver (the
// coordinator's leader) proposes them stamped with now; one the log makes
// stale before it applies (the member was heard from in between) is
// refused with ErrNotExpired and changes nothing. WakeMs is the earliest
// time after now something falls due (0 when nothing will without another
// command): the driver's timer.
func Next(s *State, now int64) (due []Command, wakeMs int64) {
	for _, name := range s.names {
		g := s.groups[name]
		for _, m := range g.members {
			at := m.SessionEndsMs()
			if d, ok := m.RevokeDeadlineMs(); ok {
				at = min(at, d)
			}
			if at <= now {
				due = append(due, Command{Group: name, AtMs: now, Expire: &Expire{Member: m.ID}})
			} else if wakeMs == 0 || at < wakeMs {
				wakeMs = at
			}
		}
	}
	return due, wakeMs
}
