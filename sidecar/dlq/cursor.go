package dlq

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"
)

// cursor is where a paged read of a dead-letter topic stands: per
// partition, the next offset to read and the offset to stop before. The
// stop offsets are the ends the first page saw, so that the pages of one
// read (a redrive above all) end: entries appended meanwhile, such as
// messages of this very redrive dead-lettered again, are for the next read.
//
// Clients get it as an opaque string ("c1." + base64url of varints and a
// CRC32C); they pass back what they got.
type cursor struct {
	next, stop []int64
}

const cursorPrefix = "c1."

// ErrBadCursor: a cursor that this code did not make, or made for another
// dead-letter topic.
var ErrBadCursor = errors.New("invalid cursor")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (c cursor) String() string {
	b := binary.AppendUvarint(nil, uint64(len(c.next)))
	for i := range c.next {
		b = binary.AppendVarint(b, c.next[i])
		b = binary.AppendVarint(b, c.stop[i])
	}
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	return cursorPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// parseCursor decodes s for a dead-letter topic of partitions partitions.
func parseCursor(s string, partitions int32) (cursor, error) {
	bad := func(why string) (cursor, error) {
		return cursor{}, fmt.Errorf("%w %q: %s: pass the next_cursor of the previous page unchanged, for the same group and topic, or none to start over", ErrBadCursor, clipText(s, 40), why)
	}
	raw, ok := strings.CutPrefix(s, cursorPrefix)
	if !ok {
		return bad("not a cursor of this version")
	}
	b, err := base64.RawURLEncoding.DecodeString(raw)
	if err != nil || len(b) < 5 {
		return bad("not a cursor")
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return bad("damaged")
	}
	n, k := binary.Uvarint(body)
	if k <= 0 || n != uint64(partitions) {
		return bad(fmt.Sprintf("made for a dead-letter topic of another partition count (now %d)", partitions))
	}
	body = body[k:]
	c := cursor{next: make([]int64, n), stop: make([]int64, n)}
	for i := range c.next {
		for _, dst := range []*int64{&c.next[i], &c.stop[i]} {
			v, k := binary.Varint(body)
			if k <= 0 || v < 0 {
				return bad("not a cursor")
			}
			*dst, body = v, body[k:]
		}
	}
	if len(body) != 0 {
		return bad("not a cursor")
	}
	return c, nil
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
