package main

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// termText is text from a message, a handler or a consumer (ids, keys,
// headers, payloads, dead-letter reasons, error texts, consumer names) as
// it may reach a terminal: every character a terminal would act on is
// written as an escape (`\x1b`, `\r`, `\u202e`), as git and kubectl do,
// so that an escape sequence in a record (an OSC 52 clipboard write, an
// OSC 8 link, a screen clear, a title change, a `\r` that overwrites the
// line) is shown, not run. Escaped: C0 controls (newline and tab too: one
// value stays on one line), DEL, C1 controls, the bidirectional controls
// that reorder what is shown, line and paragraph separators, and bytes
// that are not UTF-8. Every text printer takes untrusted text through it
// (row does for every table cell); JSON and YAML output escape by their
// own rules.
func termText(s string) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unsafeRune(r, n) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case !unsafeRune(r, n):
			b.WriteString(s[i : i+n])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80:
			b.WriteString(`\x`)
			b.WriteString(hex2(byte(r)))
		default:
			q := strconv.QuoteRuneToASCII(r) // '\u202e'
			b.WriteString(q[1 : len(q)-1])
		}
		i += n
	}
	return b.String()
}

// unsafeRune: a rune that termText escapes (n is its length in bytes).
func unsafeRune(r rune, n int) bool {
	switch {
	case r == utf8.RuneError && n == 1:
		return true
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}
