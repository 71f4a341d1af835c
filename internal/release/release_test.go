package release

import "testing"

// Every format has a name, a version and a description, and no name twice.
func TestFormats(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Formats() {
		if f.Name == "" || f.Version < 1 || f.What == "" || seen[f.Name] {
			t.Fatalf("format %+v (names so far %v)", f, seen)
		}
		seen[f.Name] = true
	}
}
