package check

import (
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/anishathalye/porcupine"
)

// The appends of a partition, checked for linearizability with porcupine
// (github.com/anishathalye/porcupine) against the model of an append-only
// log whose append returns its offset: in the order the appends take
// effect, their offsets increase.
//
// Each stored copy of a published value is one append: its call is the
// publish's first attempt; its return the acknowledgement if it is the
// copy at the acknowledged offset, else open (a copy stored by an attempt
// whose outcome the producer never learnt may have taken effect any time
// after the call). Its output is the offset it holds in the log read after
// healing. Attempts that stored nothing took no effect and are left out.
// Porcupine then looks for an order of the appends, each at an instant
// between its call and its return, in which the offsets increase.
//
// Which copies exist comes from the log, so the other rules (no acknowledged
// publish lost, no value stored twice unless an attempt's outcome was
// unknown) are what make this a check of the whole history.

// appendOp is the input of one append; its output is the offset it holds.
// Prev is the offset before it among the partition's appends (-1: none):
// the model takes the appends in offset order, so porcupine has exactly
// one candidate at each step (a model that took any higher offset let it
// try every open-ended append first, and a history of 12,800 appends took
// 19 s and 2 GiB).
type appendOp struct {
	Value     string
	Partition int32
	Prev      int64
}

// logModel: the state is the offset of the last append taken (-1: none).
var logModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		by := map[int32][]porcupine.Operation{}
		var parts []int32
		for _, op := range ops {
			p := op.Input.(appendOp).Partition
			if _, ok := by[p]; !ok {
				parts = append(parts, p)
			}
			by[p] = append(by[p], op)
		}
		slices.Sort(parts)
		out := make([][]porcupine.Operation, 0, len(parts))
		for _, p := range parts {
			out = append(out, by[p])
		}
		return out
	},
	Init: func() any { return int64(-1) },
	Step: func(state, input, output any) (bool, any) {
		return input.(appendOp).Prev == state.(int64), output
	},
	DescribeOperation: func(input, output any) string {
		in := input.(appendOp)
		return fmt.Sprintf("append(%q) -> %d/%d", in.Value, in.Partition, output.(int64))
	},
	DescribeState: func(state any) string { return fmt.Sprintf("last offset %d", state.(int64)) },
}

// appendHistory is the porcupine history of h's appends (times in
// nanoseconds since the first call).
func appendHistory(h History, copies map[string][]Record) []porcupine.Operation {
	var ops []porcupine.Operation
	var t0 int64 = math.MaxInt64
	producers := 0 // producers are 0..n-1; probes -1, -2, ... follow them
	for _, p := range h.Publishes {
		if len(copies[p.Value]) > 0 {
			t0 = min(t0, p.Invoked.UnixNano())
		}
		producers = max(producers, p.Producer+1)
	}
	prev := prevOffsets(copies)
	for _, p := range h.Publishes {
		for _, c := range copies[p.Value] {
			ret := int64(math.MaxInt64)
			if p.Acked && c.Partition == p.Partition && c.Offset == p.Offset {
				ret = p.Done.UnixNano() - t0
			}
			ops = append(ops, porcupine.Operation{
				ClientId: clientOf(p.Producer, producers),
				Input:    appendOp{Value: p.Value, Partition: c.Partition, Prev: prev[c]},
				Call:     p.Invoked.UnixNano() - t0,
				Output:   c.Offset,
				Return:   ret,
			})
		}
	}
	return ops
}

// prevOffsets maps each stored copy to the offset of the copy before it in
// its partition (-1 for the first).
func prevOffsets(copies map[string][]Record) map[Record]int64 {
	by := map[int32][]int64{}
	for _, cs := range copies {
		for _, c := range cs {
			by[c.Partition] = append(by[c.Partition], c.Offset)
		}
	}
	prev := map[Record]int64{}
	for _, cs := range copies {
		for _, c := range cs {
			offs := by[c.Partition]
			slices.Sort(offs)
			i, _ := slices.BinarySearch(offs, c.Offset)
			prev[c] = -1
			if i > 0 {
				prev[c] = offs[i-1]
			}
		}
	}
	return prev
}

// clientOf numbers producers and probes from 0, for porcupine's picture.
func clientOf(producer, producers int) int {
	if producer >= 0 {
		return producer
	}
	return producers - 1 - producer
}

// linearizable checks the appends with porcupine; on a violation it keeps
// what Visualize needs.
func (r *Result) linearizable(h History, copies map[string][]Record) {
	ops := appendHistory(h, copies)
	res, info := porcupine.CheckOperationsVerbose(logModel, ops, 0)
	if res == porcupine.Ok {
		return
	}
	r.violate("NOT LINEARIZABLE: the appends of some partition have no order that keeps real time and gives increasing offsets (porcupine: %s; linearization.html shows it)", res)
	r.linearization = &linearization{model: logModel, ops: ops, info: info}
}

// linearization is a failed check's evidence, for Visualize.
type linearization struct {
	model porcupine.Model
	ops   []porcupine.Operation
	info  porcupine.LinearizationInfo
}

// Visualize writes porcupine's page of a failed linearizability check (an
// HTML file showing the longest linearizable prefix of each partition and
// where it breaks); it writes nothing and returns false when the check
// passed.
func (r Result) Visualize(w io.Writer) (bool, error) {
	if r.linearization == nil {
		return false, nil
	}
	return true, porcupine.Visualize(r.linearization.model, r.linearization.info, w)
}
