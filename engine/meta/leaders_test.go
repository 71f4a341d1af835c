package meta

import "testing"

func TestLeaderMoveNext(t *testing.T) {
	down := func(ids ...NodeID) func(NodeID) bool {
		return func(n NodeID) bool {
			for _, id := range ids {
				if n == id {
					return true
				}
			}
			return false
		}
	}
	cases := []struct {
		name string
		m    LeaderMove
		want NodeID // 0: keep
	}{
		{"balance: hand back to the preferred leader", LeaderMove{Self: 2, Order: []NodeID{1, 2, 3}, Voters: []NodeID{1, 2, 3}}, 1},
		{"balance: this node is the preferred leader", LeaderMove{Self: 1, Order: []NodeID{1, 2, 3}, Voters: []NodeID{1, 2, 3}}, 0},
		{"balance: the preferred leader is leaving", LeaderMove{Self: 2, Order: []NodeID{1, 2, 3}, Voters: []NodeID{1, 2, 3}, Excluded: down(1)}, 0},
		{"balance: the preferred leader is a learner yet", LeaderMove{Self: 2, Order: []NodeID{4, 2, 3}, Voters: []NodeID{2, 3}}, 0},
		{"balance: never to another than the preferred", LeaderMove{Self: 2, Order: []NodeID{2, 1, 3}, Voters: []NodeID{1, 2, 3}}, 0},
		{"balance: no placement known (the controller)", LeaderMove{Self: 2, Voters: []NodeID{1, 2, 3}}, 0},
		{"away: the move's target first", LeaderMove{Self: 1, Order: []NodeID{4, 1, 2, 3}, Voters: []NodeID{1, 2, 3, 4}, Away: true}, 4},
		{"away: skips this node, the excluded and non-voters", LeaderMove{Self: 1, Order: []NodeID{4, 1, 2, 3}, Voters: []NodeID{1, 2, 3}, Away: true, Excluded: down(2)}, 3},
		{"away: rotates by attempt", LeaderMove{Self: 1, Order: []NodeID{1, 2, 3}, Voters: []NodeID{1, 2, 3}, Away: true, Attempt: 1}, 3},
		{"away: rotation wraps", LeaderMove{Self: 1, Order: []NodeID{1, 2, 3}, Voters: []NodeID{1, 2, 3}, Away: true, Attempt: 2}, 2},
		{"away: the controller, by its voters", LeaderMove{Self: 2, Voters: []NodeID{1, 2, 3}, Away: true}, 1},
		{"away: the only voter keeps it", LeaderMove{Self: 1, Order: []NodeID{1}, Voters: []NodeID{1}, Away: true}, 0},
		{"away: every other voter excluded", LeaderMove{Self: 1, Order: []NodeID{1, 2}, Voters: []NodeID{1, 2}, Away: true, Excluded: down(2)}, 0},
	}
	for _, c := range cases {
		got, ok := c.m.Next()
		if ok != (c.want != 0) || got != c.want {
			t.Errorf("%s: Next() = %d, %v; want %d", c.name, got, ok, c.want)
		}
	}
}
