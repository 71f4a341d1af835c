package main

import (
	"fmt"
	"strings"

	spoolv1 "github.com/spoolmq/spool/proto/spool/v1"
)

// progress draws a progress bar of a paged read on stderr, over itself,
// when stderr is a terminal (nothing otherwise: pipes and logs get the
// summary only). extra follows the bar ("42 redriven").
func (a *app) progress(what string, p *spoolv1.ScanProgress, extra ...string) {
	if !a.stderrTTY || p.GetTotal() <= 0 {
		return
	}
	const width = 30
	done := min(max(p.GetRead()*width/p.GetTotal(), 0), width)
	line := fmt.Sprintf("\r%s [%s%s] %3d%% %d/%d records", what, strings.Repeat("#", int(done)), strings.Repeat(".", int(width-done)),
		p.GetRead()*100/p.GetTotal(), p.GetRead(), p.GetTotal())
	if len(extra) > 0 {
		line += ", " + strings.Join(extra, ", ")
	}
	fmt.Fprint(a.stderr, line+"\033[K")
	a.drawn = true
}

// progressDone ends the bar's line, if one was drawn.
func (a *app) progressDone() {
	if a.drawn {
		fmt.Fprintln(a.stderr)
		a.drawn = false
	}
}
