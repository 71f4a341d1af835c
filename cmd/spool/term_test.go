package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	spool "github.com/spoolmq/spool/sdk/go"
)

// hostile holds terminal control sequences that text from messages must
// never carry to an operator's terminal: an OSC 52 clipboard write, an
// OSC 8 link, a screen clear, a title change, a carriage return that
// overwrites the line, a C1 CSI and a bidi override.
const hostile = "a\x1b]52;c;ZXZpbA==\x07b\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\c\x1b[2Jd\x1b]0;owned\x07e\rf\u009b31mg\u202eh\x7fi"

// unsafeForTerminal is the first byte or rune of out that a terminal
// would act on: C0 controls but newline, DEL, C1 controls, bidi controls.
func unsafeForTerminal(out string) (string, bool) {
	for i, r := range out {
		switch {
		case r == '\n':
		case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0, r == utf8.RuneError,
			r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return out[max(i-20, 0):min(i+20, len(out))], true
		}
	}
	return "", false
}

// Every text printer of tail, dlq peek and dlq list escapes what came
// from a message, a handler or a consumer: header names and values, ids,
// payloads, dead-letter reasons, handler errors, consumer names.
func TestTextOutputEscapesControlSequences(t *testing.T) {
	s := startSidecar(t)
	if r := s.spool("", false, "produce", jobsT, "payload "+hostile, "--key", "k"+hostile, "--id", "id"+hostile, "--header", "h"+hostile+"=v"+hostile); r.code != 0 {
		t.Fatal(r.stderr)
	}
	s.waitEnd(jobsT, 1)

	out, _, stopTail := s.spoolBackground("tail", jobsT, "--group", workers, "--from-beginning", "--headers")
	defer stopTail()
	stop := s.subscribe(workers, jobsT, func(_ context.Context, m *spool.Message) error {
		if m.Attempt == 1 {
			return spool.Retry(time.Millisecond, errors.New("error "+hostile))
		}
		return spool.DeadLetter("reason " + hostile)
	}, spool.WithConcurrency(1), spool.WithConsumerName("consumer"+hostile))
	eventually(t, 20*time.Second, "the tail saw the dead letter", func() bool { return strings.Contains(out.String(), "dead-lettered") })
	stop()

	runs := map[string]string{"tail --group": out.String()}
	for name, args := range map[string][]string{
		"tail":     {"tail", jobsT, "--from-beginning", "--limit", "1", "--headers"},
		"dlq peek": {"dlq", "peek", "--group", workers, "--topic", jobsT},
		"dlq list": {"dlq", "list", "--group", workers, "--topic", jobsT},
	} {
		r := s.spool("", false, args...)
		if r.code != 0 {
			t.Fatalf("%s: exit %d: %s", name, r.code, r.stderr)
		}
		runs[name] = r.stdout + r.stderr
	}
	for name, got := range runs {
		if !strings.Contains(got, `\x1b]52;c;ZXZpbA==\x07`) {
			t.Errorf("%s: the sequences are not shown escaped:\n%s", name, got)
		}
		if at, bad := unsafeForTerminal(got); bad {
			t.Errorf("%s: wrote a control character to the terminal, near %q", name, at)
		}
	}
}

func TestTermText(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcödé, 日本, 🙂": "plain text, ünïcödé, 日本, 🙂",
		"\x1b[2J":                    `\x1b[2J`,
		"a\rb\nc\td":                 `a\rb\nc\td`,
		"\u009b\u202e\u2066\x7f":     `\u009b\u202e\u2066\x7f`,
		"bad \xff\xfe utf-8":         `bad \xff\xfe utf-8`,
		`back\slash`:                 `back\slash`,
	} {
		if got := termText(in); got != want {
			t.Errorf("termText(%q) = %q, want %q", in, got, want)
		}
	}
}
