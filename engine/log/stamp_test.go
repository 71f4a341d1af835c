package log

import (
	"bytes"
	"testing"
)

// TestStampRecords: a batch keeps its times when they lie between the
// floor and the leader's clock, and otherwise moves as a whole into that
// range; a stamped copy decodes (its body CRC is right), the original is
// left as it was, and the floor returned is the batch's largest time.
func TestStampRecords(t *testing.T) {
	recs := []Record{{Value: []byte("a"), Timestamp: 1000}, {Value: []byte("b"), Timestamp: 1500}, {Value: []byte("c"), Timestamp: 1200}}
	data := EncodeRecords(nil, BatchHeader{ProducerID: 7, BaseSequence: 3}, recs, 0)
	orig := bytes.Clone(data)
	for _, tc := range []struct {
		name       string
		floor, now int64
		first, max int64
	}{
		{"within", 900, 2000, 1000, 1500},
		{"at the floor", 1000, 1000, 1000, 1500},
		{"older than the log", 1700, 5000, 1700, 2200},
		{"from a clock ahead", 0, 800, 800, 1300},
		{"ahead, but the floor is later", 950, 800, 950, 1450},
	} {
		got, last := StampRecords(data, tc.floor, tc.now)
		if !bytes.Equal(data, orig) {
			t.Fatalf("%s: the payload given was changed", tc.name)
		}
		if last != tc.max {
			t.Errorf("%s: floor after %d, want %d", tc.name, last, tc.max)
		}
		rs, err := RecordsOf(got, 1<<20, nil)
		if err != nil {
			t.Fatalf("%s: stamped payload does not decode: %v", tc.name, err)
		}
		if rs[0].Timestamp != tc.first || rs[1].Timestamp-rs[0].Timestamp != 500 || rs[2].Timestamp-rs[0].Timestamp != 200 {
			t.Errorf("%s: times %d %d %d, want the batch moved to start at %d", tc.name, rs[0].Timestamp, rs[1].Timestamp, rs[2].Timestamp, tc.first)
		}
		if ts, _ := PayloadMaxTimestamp(got); ts != tc.max {
			t.Errorf("%s: header max %d, want %d", tc.name, ts, tc.max)
		}
	}
	if got, last := StampRecords([]byte("not a batch"), 42, 100); string(got) != "not a batch" || last != 42 {
		t.Errorf("a non-record payload: %q, %d", got, last)
	}
}
