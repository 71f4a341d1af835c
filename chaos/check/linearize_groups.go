package check

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// A group's committed offsets, checked for linearizability with porcupine
// against the model of one register per (group, partition): a commit sets
// it, a read returns it (-1 before the first commit). What the group's
// coordinator answers must be explainable by one order of the commits and
// reads, each at an instant between its call and its return: a read never
// returns a commit older than one a read before it returned, nor one that
// an acknowledged commit before its call replaced, nor a value nobody
// committed. A commit whose outcome the client never learnt may take
// effect any time after its call, or never; a commit that definitely
// failed takes none.

// GroupOp is one operation on a group's committed offset of a partition,
// as a client of the group's coordinator saw it.
type GroupOp struct {
	Client    int
	Group     string
	Partition int32
	// Commit: a commit of Offset; else a read that answered Offset (-1:
	// nothing committed).
	Commit        bool
	Offset        int64
	Invoked, Done time.Time
	// Unknown: a commit whose answer never came (Done is ignored); Failed:
	// one refused, which took no effect (left out).
	Unknown, Failed bool
}

// groupKey names a register: one group's committed offset of one partition.
type groupKey struct {
	Group     string
	Partition int32
}

// groupOpIn is a porcupine input: the register and, for a commit, its
// offset (a read's answer is the output).
type groupOpIn struct {
	Key    groupKey
	Commit bool
	Offset int64
}

var groupModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		by := map[groupKey][]porcupine.Operation{}
		for _, op := range ops {
			k := op.Input.(groupOpIn).Key
			by[k] = append(by[k], op)
		}
		keys := slices.SortedFunc(func(yield func(groupKey) bool) {
			for k := range by {
				if !yield(k) {
					return
				}
			}
		}, func(a, b groupKey) int {
			return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Partition, b.Partition))
		})
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() any { return int64(-1) },
	Step: func(state, input, output any) (bool, any) {
		in := input.(groupOpIn)
		if in.Commit {
			return true, in.Offset
		}
		return output.(int64) == state.(int64), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(groupOpIn)
		if in.Commit {
			return fmt.Sprintf("commit(%s/%d, %d)", in.Key.Group, in.Key.Partition, in.Offset)
		}
		return fmt.Sprintf("read(%s/%d) -> %d", in.Key.Group, in.Key.Partition, output.(int64))
	},
	DescribeState: func(state any) string { return fmt.Sprintf("committed %d", state.(int64)) },
}

// groupHistory is the porcupine history of ops (times in nanoseconds since
// the first call).
func groupHistory(ops []GroupOp) []porcupine.Operation {
	var t0 int64 = math.MaxInt64
	for _, o := range ops {
		t0 = min(t0, o.Invoked.UnixNano())
	}
	var out []porcupine.Operation
	for _, o := range ops {
		if o.Failed {
			continue
		}
		ret := o.Done.UnixNano() - t0
		if o.Unknown {
			ret = math.MaxInt64
		}
		out = append(out, porcupine.Operation{
			ClientId: o.Client,
			Input:    groupOpIn{Key: groupKey{o.Group, o.Partition}, Commit: o.Commit, Offset: o.Offset},
			Call:     o.Invoked.UnixNano() - t0,
			Output:   o.Offset,
			Return:   ret,
		})
	}
	return out
}

// groupCommitsLinearizable checks ops with porcupine; a violation keeps
// what Visualize needs unless the appends' check kept its own first.
func (r *Result) groupCommitsLinearizable(ops []GroupOp) {
	if len(ops) == 0 {
		return
	}
	hist := groupHistory(ops)
	res, info := porcupine.CheckOperationsVerbose(groupModel, hist, 10*time.Second)
	if res == porcupine.Ok {
		return
	}
	r.violate("GROUP COMMITS NOT LINEARIZABLE: some group's committed offset of a partition was read in no order that keeps real time, each read returning the last commit (porcupine: %s)", res)
	if r.linearization == nil {
		r.linearization = &linearization{model: groupModel, ops: hist, info: info}
	}
}
