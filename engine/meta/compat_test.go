package meta

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spoolmq/spool/internal/testrelease"
)

// TestPreviousReleaseReadsWhatVersion1Writes proves, with the previous
// release's own decoder (its engine/meta, built from the commit RELEASES
// names), that what this release writes into group 0 while the cluster is
// at version 1 — the state and every command it proposes then — is read by
// a node of that release; and that what it writes only after finalizing
// (the versioned state, FinalizeVersion) is refused by it, which is why
// those wait for the cluster version (VersionedState).
//
// It needs the repository's history (git) and the Go toolchain; it builds
// the previous release's engine/meta once (seconds; the build cache keeps
// it). Without the history (a shallow clone, a source archive) it skips.
func TestPreviousReleaseReadsWhatVersion1Writes(t *testing.T) {
	decode := previousReleaseDecoder(t)
	s := seedState(t)
	mustApply(t, s, Command{AddNode: &AddNode{Addr: "10.0.0.4:7946", Token: "node-four"}})
	mustApply(t, s, Command{SetNodeDown: &SetNodeDown{ID: 3, Down: true}})
	m, ok := NextMove(s) // gives node 4 a replica: an incarnation, as 0.1.0 writes them
	if !ok {
		t.Fatal("no move off the down node")
	}
	mustApply(t, s, Command{MoveReplicas: &m})
	if s.lastInc == 0 {
		t.Fatal("the move gave no incarnation")
	}
	v1, err := EncodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	inputs := map[string][]byte{"state at version 1": v1}
	for _, c := range append(seedCommands(),
		Command{SetNodeDown: &SetNodeDown{ID: 3, Down: true}},
		Command{DecommissionNode: &DecommissionNode{ID: 2}},
		Command{RemoveNode: &RemoveNode{ID: 2}},
		Command{FinishMove: &FinishMove{Group: 1, Replicas: []NodeID{1, 2, 4}}},
		Command{DropDamaged: &DropDamaged{Group: 1, Node: 2}}) {
		b, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		inputs[fmt.Sprintf("command %s %d", kind(c), len(inputs))] = b
	}
	f, err := PlanFinalize(s, map[NodeID]VersionRange{1: upgraded, 2: upgraded, 3: upgraded, 4: upgraded})
	if err != nil {
		t.Fatal(err)
	}
	fin := Command{FinalizeVersion: &f}
	refused := map[string]bool{"command FinalizeVersion": true, "state at version 2": true}
	if inputs["command FinalizeVersion"], err = EncodeCommand(fin); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, fin)
	if inputs["state at version 2"], err = EncodeState(s); err != nil {
		t.Fatal(err)
	}
	for name, res := range decode(inputs) {
		switch {
		case refused[name] && res == "ok":
			t.Errorf("%s: the previous release read it; it must wait for the cluster version", name)
		case !refused[name] && res != "ok":
			t.Errorf("%s: the previous release refuses it: %s", name, res)
		case refused[name]:
			t.Logf("%s: refused by the previous release, as expected: %s", name, res)
		}
	}
}

// decoderMain is the program built from the previous release's source:
// each argument is a file named "state-*" or "command-*"; it prints ok or
// the error, a line each.
const decoderMain = `package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spoolmq/spool/engine/meta"
)

func main() {
	for _, path := range os.Args[1:] {
		b, err := os.ReadFile(path)
		if err == nil && strings.Contains(path, "state-") {
			_, err = meta.DecodeState(b)
		} else if err == nil {
			_, err = meta.DecodeCommand(b)
		}
		if err != nil {
			fmt.Println(strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		fmt.Println("ok")
	}
}
`

// previousReleaseDecoder builds a program against the previous release's
// engine/meta (internal/testrelease: its commit in RELEASES, taken from
// this clone's history) that decodes states and commands with that
// release's rules, and returns a function that runs it: name → "ok" or the
// error.
func previousReleaseDecoder(t *testing.T) func(map[string][]byte) map[string]string {
	t.Helper()
	rel, err := testrelease.Previous()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := testrelease.BuildProgram(rel, "meta-decoder", decoderMain)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return func(inputs map[string][]byte) map[string]string {
		var names, args []string
		for name, b := range inputs {
			kind := "command-"
			if strings.HasPrefix(name, "state") {
				kind = "state-"
			}
			path := filepath.Join(dir, fmt.Sprintf("%s%d", kind, len(names)))
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			names, args = append(names, name), append(args, path)
		}
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("the previous release's decoder: %v", err)
		}
		lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
		if len(lines) != len(names) {
			t.Fatalf("the previous release's decoder printed %d lines for %d inputs:\n%s", len(lines), len(names), out)
		}
		res := map[string]string{}
		for i, name := range names {
			res[name] = lines[i]
		}
		return res
	}
}

// kind names the command's kind (its field of Command).
func kind(c Command) string {
	v := reflect.ValueOf(c)
	for i := range v.NumField() {
		if !v.Field(i).IsNil() {
			return v.Type().Field(i).Name
		}
	}
	return "none"
}
