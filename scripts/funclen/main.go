// Command funclen fails when a function is longer than -max lines (120),
// outside tests and generated code, unless scripts/funclen-allow.txt lists
// it. scripts/banned.sh runs it (make lint).
//
// A function's length counts every line from its "func" keyword to its
// closing brace, comments and blank lines included: what a reader has to
// hold. Function literals count toward the function holding them.
//
// The allow-list has one function a line, "path:Func  reason" (a method is
// Recv.Method), "#" starting a comment. An entry that names no function
// over the limit any more is an error too, so that the list only shrinks:
// remove the line when the function is split.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strings"
)

func main() {
	maxLines := flag.Int("max", 120, "the most lines a function may have")
	allowPath := flag.String("allow", "scripts/funclen-allow.txt", "the allow-list of current exceptions")
	flag.Parse()
	allow, err := readAllow(*allowPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(2)
	}
	files := flag.Args()
	if len(files) == 0 {
		// Tracked files and new ones not ignored, so a file not yet added
		// is checked too.
		out, err := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard", "*.go").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, "funclen: git ls-files:", err)
			os.Exit(2)
		}
		files = strings.Fields(string(out))
	}
	long, err := longFuncs(files, *maxLines)
	if err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(2)
	}
	problems := check(long, allow, *allowPath, *maxLines)
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
}

// funcInfo is one function over the limit.
type funcInfo struct {
	key   string // path:Func or path:Recv.Method
	lines int
}

// check compares the long functions with the allow-list.
func check(long []funcInfo, allow map[string]string, allowPath string, maxLines int) []string {
	var problems []string
	seen := map[string]bool{}
	for _, f := range long {
		seen[f.key] = true
		if _, ok := allow[f.key]; !ok {
			problems = append(problems, fmt.Sprintf("banned: %s is %d lines, more than %d: split it (or, for a reason, list it in %s)", f.key, f.lines, maxLines, allowPath))
		}
	}
	for key := range allow {
		if !seen[key] {
			problems = append(problems, fmt.Sprintf("banned: %s lists %s, which is no function over %d lines (any more?): remove the line", allowPath, key, maxLines))
		}
	}
	slices.Sort(problems)
	return problems
}

// generated reports whether a file is generated code: *.pb.go (also
// *_vtproto.pb.go), or marked as Go's convention says.
func generated(path string, f *ast.File) bool {
	if strings.HasSuffix(path, ".pb.go") {
		return true
	}
	return ast.IsGenerated(f)
}

// longFuncs returns the functions of files (tests and generated code
// skipped) longer than maxLines.
func longFuncs(files []string, maxLines int) ([]funcInfo, error) {
	var long []funcInfo
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted, not yet committed
		}
		if err != nil {
			return nil, err
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		if generated(path, f) {
			continue
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > maxLines {
				long = append(long, funcInfo{key: path + ":" + funcName(fd), lines: n})
			}
		}
	}
	return long, nil
}

// funcName is Func, or Recv.Method for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fd.Name.Name
		}
		return fd.Name.Name
	}
}

// readAllow reads the allow-list: key → reason. A line without a reason is
// an error: every exception says why.
func readAllow(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	allow := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, reason, _ := strings.Cut(line, " ")
		if strings.TrimSpace(reason) == "" || !strings.Contains(key, ":") {
			return nil, fmt.Errorf("%s:%d: want \"path:Func  reason\", got %q", path, n, line)
		}
		if _, dup := allow[key]; dup {
			return nil, fmt.Errorf("%s:%d: %s listed twice", path, n, key)
		}
		allow[key] = strings.TrimSpace(reason)
	}
	return allow, sc.Err()
}
