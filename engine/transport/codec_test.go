package transport

import (
	"errors"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"

	clusterv1 "github.com/spoolmq/spool/proto/spool/cluster/v1"
)

func genMessage(from, to uint64) *rapid.Generator[Message] {
	return rapid.Custom(func(t *rapid.T) Message {
		g := rapid.Uint64Range(0, 5).Draw(t, "group")
		switch rapid.IntRange(0, 3).Draw(t, "kind") {
		case 0:
			return heartbeat(g, from, to, rapid.Uint64Range(0, 9).Draw(t, "term"), rapid.Uint64().Draw(t, "commit"))
		case 1:
			m := heartbeat(g, from, to, rapid.Uint64Range(0, 9).Draw(t, "term"), 0)
			m.Msg.Type = raftpb.MsgHeartbeatResp
			if rapid.Bool().Draw(t, "ctx") {
				m.Msg.Context = []byte("ctx") // not coalescable
			}
			return m
		default:
			n := rapid.IntRange(0, 3).Draw(t, "entries")
			m := app(g, from, to, rapid.Uint64().Draw(t, "index"), "")
			m.Msg.Entries = nil
			for range n {
				m.Msg.Entries = append(m.Msg.Entries, raftpb.Entry{Data: rapid.SliceOfN(rapid.Byte(), 0, 3000).Draw(t, "data")})
			}
			return m
		}
	})
}

// Against a dumb model: encoding then decoding gives back every message,
// the heartbeats of each frame first, the others in send order; each frame
// stays within MaxBatchBytes unless one message alone is larger; every
// coalescable heartbeat is in compact form.
func TestCodecRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		msgs := rapid.SliceOfN(genMessage(4, 7), 0, 60).Draw(t, "msgs")
		maxBatch := rapid.IntRange(64, 20000).Draw(t, "maxBatch")
		coalesce := rapid.Bool().Draw(t, "coalesce")
		frames, st := encoder{maxBatchBytes: maxBatch, coalesce: coalesce}.encode(msgs)
		var got []Message
		for _, f := range frames {
			size := proto.Size(f)
			if size > maxBatch+heartbeatSizeMax && max(heartbeatCount(f.GetHeartbeats()), 0)+len(f.Messages) > 1 {
				t.Fatalf("frame of %d bytes with %d messages, limit %d", size, len(f.Messages), maxBatch)
			}
			// The frame survives the wire.
			b, _ := proto.Marshal(f)
			var back clusterv1.Batch
			if err := proto.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			out, bad := decodeBatch(&back, 4, 7, 1<<20, nil)
			if len(bad) > 0 {
				t.Fatalf("refused %v", bad)
			}
			got = append(got, out...)
		}
		// Model: per frame, heartbeats (coalesced ones) first. Compare as
		// two sequences: coalesced heartbeats in order, and the rest in order.
		var wantHB, wantRest, gotHB, gotRest []raftpb.Message
		for _, m := range msgs {
			if coalesce && coalescable(&m.Msg) {
				wantHB = append(wantHB, m.Msg)
			} else {
				wantRest = append(wantRest, m.Msg)
			}
		}
		for _, m := range got {
			if coalesce && coalescable(&m.Msg) {
				gotHB = append(gotHB, m.Msg)
			} else {
				gotRest = append(gotRest, m.Msg)
			}
		}
		if st.messages != len(msgs) || st.heartbeats != len(wantHB) {
			t.Fatalf("stats %+v for %d messages, %d heartbeats", st, len(msgs), len(wantHB))
		}
		eq := func(a, b []raftpb.Message) bool {
			if len(a) != len(b) {
				return false
			}
			for i := range a {
				x, _ := a[i].Marshal()
				y, _ := b[i].Marshal()
				if string(x) != string(y) {
					return false
				}
			}
			return true
		}
		if !eq(wantHB, gotHB) || !eq(wantRest, gotRest) {
			t.Fatalf("round trip changed the messages:\nheartbeats %v\nvs         %v\nothers %v\nvs     %v", wantHB, gotHB, wantRest, gotRest)
		}
	})
}

func TestCheckMessageRefusals(t *testing.T) {
	for _, c := range []struct {
		m    raftpb.Message
		want error
	}{
		{raftpb.Message{Type: raftpb.MsgApp, From: 2, To: 1}, nil},
		{raftpb.Message{Type: raftpb.MsgVote, From: 3, To: 1}, errSender},
		{raftpb.Message{Type: raftpb.MsgVote, From: 2, To: 3}, errReceiver},
		{raftpb.Message{Type: raftpb.MsgHup, From: 2, To: 1}, errLocalType},
		{raftpb.Message{Type: raftpb.MsgStorageAppend, From: 2, To: 1}, errLocalType},
		{raftpb.Message{Type: 1000, From: 2, To: 1}, errLocalType},
	} {
		if err := checkMessage(&c.m, 2, 1); !errors.Is(err, c.want) {
			t.Errorf("%v: %v, want %v", c.m.Type, err, c.want)
		}
	}
}

// Backoff delays grow, stay within [cap/2, cap] and never pass Max.
func TestBackoffDelay(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := Backoff{Base: time.Duration(rapid.Int64Range(1, 1e9).Draw(t, "base"))}
		b.Max = b.Base * time.Duration(rapid.Int64Range(1, 100).Draw(t, "mult"))
		attempt := rapid.IntRange(1, 1000).Draw(t, "attempt")
		r := rapid.Float64Range(0, 0.999).Draw(t, "r")
		d := b.Delay(attempt, r)
		c := b.Base
		for i := 1; i < attempt && c < b.Max; i++ {
			c *= 2
		}
		c = min(c, b.Max)
		if d < c/2 || d > c || d > b.Max {
			t.Fatalf("Delay(%d, %v) = %v, cap %v", attempt, r, d, c)
		}
	})
}

// A frame whose heartbeat columns differ in length is refused whole, and
// its other messages still go through.
func TestDecodeRefusesRaggedHeartbeats(t *testing.T) {
	good, _ := (&raftpb.Message{Type: raftpb.MsgApp, From: 2, To: 1}).Marshal()
	b := &clusterv1.Batch{
		Heartbeats: &clusterv1.Heartbeats{GroupIds: []uint64{1, 2}, Froms: []uint64{2, 2}, Tos: []uint64{1}, Terms: []uint64{1, 1}, Commits: []uint64{0, 0}, Responses: []bool{false, false}},
		Messages:   []*clusterv1.GroupMessage{{GroupId: 1, Message: good}},
	}
	msgs, bad := decodeBatch(b, 2, 1, 1<<20, nil)
	if len(msgs) != 1 || msgs[0].Msg.Type != raftpb.MsgApp || len(bad) != 1 || !errors.Is(bad[0], errColumns) {
		t.Fatalf("msgs %v, bad %v", msgs, bad)
	}
}
